// Reads the textual IR that ir/Printer.cpp prints:
//
//   graph @NAME opset N {
//     %x = input TYPE
//     %w = param|const TYPE [frozen] (dense<LITERAL> | external("loc", OFF, LEN) | nodata)
//     %a, _ = OpType(%x, _, %y) {name = ATTR, ...} : TYPE, _ loc("node name")
//     return %a, %b
//   }
//
// TYPE is `f32[2,16]` or `seq<f32>`; LITERAL is a decimal number (one value
// for every element: a splat), a list `[1, 2, 3]`, or `0x` and the raw bytes
// in hex. Values may be used before the line that defines them (the verifier
// checks the order); `//` starts a comment.
#include "ir/Parser.h"

#include "ir/Printer.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace megac::ir {
namespace {

enum class Tok {
  Eof, Error, Word, ValueName, GraphName, String,
  LParen, RParen, LBrace, RBrace, LSquare, RSquare, Less, Greater, Comma, Equal, Colon,
};

struct Token {
  Tok kind = Tok::Eof;
  size_t offset = 0;     // where the token starts in the text
  llvm::StringRef text;  // the raw text
  std::string str;       // String/ValueName/GraphName: the decoded name; Error: the message
};

bool isBareChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' || c == '/' || c == '-';
}
// A word is a keyword, a bare op type or attribute name, or a number ("-1.5e+3",
// "0x3F80", "inf"). It cannot start with ':' (the type separator) or '/' (comments).
bool isWordStart(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '+';
}
bool isWordChar(char c) { return isBareChar(c) || c == '+'; }
bool isBareName(llvm::StringRef s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!isBareChar(c)) return false;
  return true;
}

std::string describeChar(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02X", u);
  return buf;
}

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
public:
  explicit Lexer(llvm::StringRef text) : text_(text) {}

  Token next() {
    skipSpaceAndComments();
    size_t start = pos_;
    if (pos_ >= text_.size()) return make(Tok::Eof, start);
    char c = text_[pos_];
    switch (c) {
    case '(': return single(Tok::LParen);
    case ')': return single(Tok::RParen);
    case '{': return single(Tok::LBrace);
    case '}': return single(Tok::RBrace);
    case '[': return single(Tok::LSquare);
    case ']': return single(Tok::RSquare);
    case '<': return single(Tok::Less);
    case '>': return single(Tok::Greater);
    case ',': return single(Tok::Comma);
    case '=': return single(Tok::Equal);
    case ':': return single(Tok::Colon);
    case '"': return lexString(Tok::String, start);
    case '%': return lexName(Tok::ValueName, start);
    case '@': return lexName(Tok::GraphName, start);
    default: break;
    }
    if (isWordStart(c)) {
      while (pos_ < text_.size() && isWordChar(text_[pos_])) ++pos_;
      return make(Tok::Word, start);
    }
    return error(start, "unexpected character " + describeChar(c));
  }

private:
  Token make(Tok kind, size_t start) {
    Token t;
    t.kind = kind;
    t.offset = start;
    t.text = text_.slice(start, pos_);
    return t;
  }
  Token single(Tok kind) {
    ++pos_;
    return make(kind, pos_ - 1);
  }
  Token error(size_t at, std::string msg) {
    Token t;
    t.kind = Tok::Error;
    t.offset = at;
    t.str = std::move(msg);
    pos_ = text_.size(); // nothing after a lexical error is read
    return t;
  }

  void skipSpaceAndComments() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // `%name`, `%"quoted name"` (and the same after '@').
  Token lexName(Tok kind, size_t start) {
    char sigil = text_[pos_++];
    if (pos_ < text_.size() && text_[pos_] == '"') {
      Token t = lexString(kind, start);
      return t;
    }
    size_t nameStart = pos_;
    while (pos_ < text_.size() && isBareChar(text_[pos_])) ++pos_;
    if (pos_ == nameStart)
      return error(start, std::string("expected a name or a quoted string after '") + sigil + "'");
    Token t = make(kind, start);
    t.str = text_.slice(nameStart, pos_).str();
    return t;
  }

  // A quoted string with \" \\ \n \t \r \xNN escapes; text_[pos_] is the quote.
  Token lexString(Tok kind, size_t start) {
    size_t quote = pos_++;
    std::string s;
    while (true) {
      if (pos_ >= text_.size()) return error(quote, "unterminated string");
      char c = text_[pos_];
      if (c == '"') break;
      if (c == '\n') return error(quote, "unterminated string (a string cannot span lines; write \\n)");
      if (c != '\\') {
        s += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= text_.size()) return error(quote, "unterminated string");
      char e = text_[pos_ + 1];
      switch (e) {
      case '"': s += '"'; pos_ += 2; break;
      case '\\': s += '\\'; pos_ += 2; break;
      case 'n': s += '\n'; pos_ += 2; break;
      case 't': s += '\t'; pos_ += 2; break;
      case 'r': s += '\r'; pos_ += 2; break;
      case 'x': {
        int hi = pos_ + 2 < text_.size() ? hexDigit(text_[pos_ + 2]) : -1;
        int lo = pos_ + 3 < text_.size() ? hexDigit(text_[pos_ + 3]) : -1;
        if (hi < 0 || lo < 0) return error(pos_, "\\x must be followed by two hex digits");
        s += char(hi * 16 + lo);
        pos_ += 4;
        break;
      }
      default: return error(pos_, "unknown escape \\" + std::string(1, e) + " in string (use \\\" \\\\ \\n \\t \\r \\xNN)");
      }
    }
    ++pos_; // closing quote
    Token t = make(kind, start);
    t.str = std::move(s);
    return t;
  }

  llvm::StringRef text_;
  size_t pos_ = 0;
};

// [+-]?[0-9]+
bool hasIntSyntax(llvm::StringRef w) {
  if (!w.empty() && (w[0] == '-' || w[0] == '+')) w = w.drop_front();
  if (w.empty()) return false;
  for (char c : w)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// [+-]?(inf|nan|DIGITS[.DIGITS*][e[+-]DIGITS]|.DIGITS[e[+-]DIGITS])
bool hasFloatSyntax(llvm::StringRef w) {
  if (!w.empty() && (w[0] == '-' || w[0] == '+')) w = w.drop_front();
  if (w == "inf" || w == "nan") return true;
  size_t i = 0, n = w.size();
  auto digits = [&] {
    size_t s = i;
    while (i < n && std::isdigit(static_cast<unsigned char>(w[i]))) ++i;
    return i - s;
  };
  size_t mantissa = digits();
  if (i < n && w[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (i < n && (w[i] == 'e' || w[i] == 'E')) {
    ++i;
    if (i < n && (w[i] == '+' || w[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == n;
}

// The value of a word with integer syntax; false when it does not fit.
bool intValue(llvm::StringRef w, int64_t &out) {
  if (w.startswith("+")) w = w.drop_front();
  return !w.getAsInteger(10, out);
}

double floatValue(llvm::StringRef w) {
  bool negative = w.startswith("-");
  llvm::StringRef body = w.drop_while([](char c) { return c == '-' || c == '+'; });
  if (body == "nan") return std::copysign(std::numeric_limits<double>::quiet_NaN(), negative ? -1.0 : 1.0);
  if (body == "inf") return negative ? -HUGE_VAL : HUGE_VAL;
  return std::strtod(w.str().c_str(), nullptr);
}

class Parser {
public:
  Parser(llvm::StringRef text, llvm::StringRef source) : lexer_(text), text_(text), source_(source) {
    tok_ = lexer_.next();
    next_ = lexer_.next();
  }

  llvm::Expected<std::unique_ptr<Graph>> parse() {
    g_ = std::make_unique<Graph>();
    g_->sourcePath = source_.str();
    g_->baseDir = llvm::sys::path::parent_path(source_).str();
    if (auto e = parseHeader()) return e;
    bool done = false;
    while (!done)
      if (auto e = parseStatement(done)) return e;
    if (auto e = resolveUses()) return e;
    return std::move(g_);
  }

private:
  // --- tokens and errors ---
  void advance() {
    tok_ = std::move(next_);
    next_ = lexer_.next();
  }
  bool isWord(llvm::StringRef w) const { return tok_.kind == Tok::Word && tok_.text == w; }
  bool nextIs(Tok k) const { return next_.kind == k; }

  std::string position(size_t offset) const {
    offset = std::min(offset, text_.size());
    llvm::StringRef before = text_.take_front(offset);
    size_t line = 1 + before.count('\n');
    size_t lineStart = before.rfind('\n');
    size_t col = lineStart == llvm::StringRef::npos ? offset + 1 : offset - lineStart;
    return source_.str() + ":" + std::to_string(line) + ":" + std::to_string(col);
  }
  llvm::Error errorAt(size_t offset, const llvm::Twine &msg) const {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), position(offset) + ": " + msg.str());
  }
  std::string describe(const Token &t) const {
    switch (t.kind) {
    case Tok::Eof: return "end of input";
    case Tok::Word: return "'" + t.text.str() + "'";
    case Tok::String: return "a string";
    case Tok::ValueName: return "value %" + printableName(t.str);
    case Tok::GraphName: return "@" + printableName(t.str);
    default: return "'" + t.text.str() + "'";
    }
  }
  // "expected X, got Y" at the current token; a lexical error there wins.
  llvm::Error expected(const llvm::Twine &what) const {
    if (tok_.kind == Tok::Error) return errorAt(tok_.offset, tok_.str);
    return errorAt(tok_.offset, "expected " + what + ", got " + describe(tok_));
  }
  llvm::Error expect(Tok kind, const llvm::Twine &what) {
    if (tok_.kind != kind) return expected(what);
    advance();
    return llvm::Error::success();
  }
  llvm::Error expectWord(llvm::StringRef w, const llvm::Twine &what) {
    if (!isWord(w)) return expected(what);
    advance();
    return llvm::Error::success();
  }

  // --- numbers ---
  llvm::Error parseInt(int64_t &out, const llvm::Twine &what) {
    if (tok_.kind != Tok::Word || !hasIntSyntax(tok_.text)) return expected(what);
    if (!intValue(tok_.text, out)) return errorAt(tok_.offset, "integer " + tok_.text + " is out of range");
    advance();
    return llvm::Error::success();
  }
  llvm::Error parseFloat(double &out, const llvm::Twine &what) {
    if (tok_.kind != Tok::Word || !hasFloatSyntax(tok_.text)) return expected(what);
    out = floatValue(tok_.text);
    advance();
    return llvm::Error::success();
  }

  // --- graph structure ---
  llvm::Error parseHeader() {
    if (auto e = expectWord("graph", "'graph' at the start of the IR")) return e;
    if (tok_.kind != Tok::GraphName) return expected("the graph's name (@name)");
    g_->name = tok_.str;
    advance();
    if (auto e = expectWord("opset", "'opset' after the graph's name")) return e;
    size_t at = tok_.offset;
    if (auto e = parseInt(g_->opset, "the opset version")) return e;
    if (g_->opset < 0) return errorAt(at, "the opset version cannot be negative");
    return expect(Tok::LBrace, "'{' to open the graph's body");
  }

  struct Result {
    bool omitted = false;
    std::string name;
    size_t offset = 0;
  };

  llvm::Error parseStatement(bool &done) {
    if (isWord("return") && !nextIs(Tok::LParen)) {
      done = true;
      return parseReturn();
    }
    std::vector<Result> results;
    if (tok_.kind == Tok::ValueName || (isWord("_") && !nextIs(Tok::LParen))) {
      while (true) {
        Result r;
        r.offset = tok_.offset;
        if (tok_.kind == Tok::ValueName) r.name = tok_.str;
        else if (isWord("_")) r.omitted = true;
        else return expected("a result (%name or _)");
        advance();
        results.push_back(std::move(r));
        if (tok_.kind != Tok::Comma) break;
        advance();
      }
      if (auto e = expect(Tok::Equal, "'=' after the results")) return e;
      bool single = results.size() == 1 && !results[0].omitted;
      if (single && !nextIs(Tok::LParen)) {
        if (isWord("input")) return parseInput(results[0]);
        if (isWord("param")) return parseInitializer(results[0], ValueKind::Param);
        if (isWord("const")) return parseInitializer(results[0], ValueKind::Const);
      }
      if (single && tok_.kind != Tok::String && !(tok_.kind == Tok::Word && nextIs(Tok::LParen)))
        return expected("'input', 'param', 'const' or an op after '='");
      return parseOp(results);
    }
    if ((tok_.kind == Tok::Word || tok_.kind == Tok::String) && nextIs(Tok::LParen)) return parseOp(results);
    if (tok_.kind == Tok::RBrace) return expected("'return' before the graph's closing '}'");
    return expected("a value definition, an op or 'return'");
  }

  llvm::Error parseReturn() {
    advance(); // 'return'
    if (tok_.kind == Tok::ValueName) {
      while (true) {
        if (tok_.kind != Tok::ValueName) return expected("a value (%name) to return");
        outputUses_.push_back({tok_.str, tok_.offset});
        advance();
        if (tok_.kind != Tok::Comma) break;
        advance();
      }
    }
    if (auto e = expect(Tok::RBrace, "',' or the graph's closing '}' after return")) return e;
    if (tok_.kind != Tok::Eof) return expected("end of input after the graph's closing '}'");
    return llvm::Error::success();
  }

  llvm::Expected<ValueId> define(const Result &r, Value v) {
    auto prev = definedAt_.find(r.name);
    if (prev != definedAt_.end())
      return errorAt(r.offset, "redefinition of value %" + printableName(r.name) + " (first defined at " +
                                   position(prev->second) + ")");
    definedAt_[r.name] = r.offset;
    v.name = r.name;
    return g_->addValue(std::move(v));
  }

  llvm::Error parseInput(const Result &r) {
    advance(); // 'input'
    Value v;
    v.kind = ValueKind::Input;
    if (auto e = parseType(v.type, "the input's type")) return e;
    auto id = define(r, std::move(v));
    if (!id) return id.takeError();
    g_->inputs.push_back(*id);
    return llvm::Error::success();
  }

  llvm::Error parseInitializer(const Result &r, ValueKind kind) {
    advance(); // 'param' / 'const'
    Value v;
    v.kind = kind;
    if (auto e = parseType(v.type, "the initializer's type")) return e;
    if (isWord("frozen")) {
      v.frozen = true;
      advance();
    }
    if (isWord("dense")) {
      Tensor t;
      if (auto e = parseDense(v.type, t)) return e;
      v.data = std::move(t);
    } else if (isWord("external")) {
      advance();
      ExternalData ex;
      if (auto e = expect(Tok::LParen, "'(' after 'external'")) return e;
      if (tok_.kind != Tok::String) return expected("the external data's file name (a string)");
      ex.location = tok_.str;
      advance();
      if (auto e = expect(Tok::Comma, "',' after the external data's file name")) return e;
      if (auto e = parseInt(ex.offset, "the external data's offset")) return e;
      if (auto e = expect(Tok::Comma, "',' after the external data's offset")) return e;
      if (auto e = parseInt(ex.length, "the external data's length (-1: to the end of the file)")) return e;
      if (auto e = expect(Tok::RParen, "')' after the external data's length")) return e;
      v.external = std::move(ex);
    } else if (isWord("nodata")) {
      advance();
    } else {
      return expected("the initializer's data: dense<...>, external(...) or nodata");
    }
    auto id = define(r, std::move(v));
    return id ? llvm::Error::success() : id.takeError();
  }

  // A bare op type or attribute name, or a quoted one.
  llvm::Error parseSymbol(std::string &out, const llvm::Twine &what) {
    if (tok_.kind == Tok::String) out = tok_.str;
    else if (tok_.kind == Tok::Word && isBareName(tok_.text)) out = tok_.text.str();
    else return expected(what);
    advance();
    return llvm::Error::success();
  }

  llvm::Error parseOp(const std::vector<Result> &results) {
    Op op;
    if (auto e = parseSymbol(op.type, "an op type")) return e;
    if (auto e = expect(Tok::LParen, "'(' after the op type")) return e;
    std::vector<Use> uses;
    if (tok_.kind != Tok::RParen) {
      while (true) {
        if (tok_.kind == Tok::ValueName) {
          uses.push_back({tok_.str, tok_.offset, op.inputs.size()});
          op.inputs.push_back(kNoValue);
        } else if (isWord("_")) {
          op.inputs.push_back(kNoValue);
        } else {
          return expected("an operand (%name, or _ for an omitted input)");
        }
        advance();
        if (tok_.kind != Tok::Comma) break;
        advance();
      }
    }
    if (auto e = expect(Tok::RParen, "',' or ')' after the operands")) return e;
    if (tok_.kind == Tok::LBrace) {
      advance();
      if (auto e = parseAttrDict(op.attrs)) return e;
    }
    if (auto e = expect(Tok::Colon, "':' and the result types")) return e;
    std::vector<TensorType> types(results.size());
    for (size_t i = 0; i < results.size(); ++i) {
      if (i)
        if (auto e = expect(Tok::Comma, "',' and the type of result " + llvm::Twine(i) + " (one type per result)"))
          return e;
      if (results[i].omitted) {
        if (auto e = expectWord("_", "'_' as the type of omitted result " + llvm::Twine(i))) return e;
      } else if (auto e = parseType(types[i], "the type of result %" + printableName(results[i].name))) {
        return e;
      }
    }
    if (isWord("loc") && nextIs(Tok::LParen)) {
      advance();
      advance();
      if (tok_.kind != Tok::String) return expected("the node name (a string) in loc(...)");
      op.name = tok_.str;
      advance();
      if (auto e = expect(Tok::RParen, "')' after the node name")) return e;
    }
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i].omitted) {
        op.outputs.push_back(kNoValue);
        continue;
      }
      Value v;
      v.kind = ValueKind::Result;
      v.type = types[i];
      auto id = define(results[i], std::move(v));
      if (!id) return id.takeError();
      op.outputs.push_back(*id);
    }
    size_t opIndex = g_->ops.size();
    for (Use &u : uses) {
      u.op = int64_t(opIndex);
      inputUses_.push_back(std::move(u));
    }
    g_->addOp(std::move(op));
    return llvm::Error::success();
  }

  llvm::Error parseAttrDict(Attrs &attrs) {
    if (tok_.kind == Tok::RBrace) {
      advance();
      return llvm::Error::success();
    }
    while (true) {
      size_t at = tok_.offset;
      std::string name;
      if (auto e = parseSymbol(name, "an attribute name")) return e;
      if (attrs.has(name)) return errorAt(at, "duplicate attribute '" + name + "'");
      if (auto e = expect(Tok::Equal, "'=' after the attribute name")) return e;
      Attr a;
      if (auto e = parseAttrValue(a)) return e;
      attrs.set(name, std::move(a));
      if (tok_.kind == Tok::RBrace) break;
      if (auto e = expect(Tok::Comma, "',' or '}' after the attribute")) return e;
    }
    advance(); // '}'
    return llvm::Error::success();
  }

  // Items of a bracketed, comma-separated list; `[` is the current token.
  template <class F> llvm::Error parseList(const llvm::Twine &what, F &&item) {
    if (auto e = expect(Tok::LSquare, "'[' to open the " + what)) return e;
    if (tok_.kind == Tok::RSquare) {
      advance();
      return llvm::Error::success();
    }
    while (true) {
      if (auto e = item()) return e;
      if (tok_.kind == Tok::RSquare) break;
      if (auto e = expect(Tok::Comma, "',' or ']' in the " + what)) return e;
    }
    advance();
    return llvm::Error::success();
  }

  llvm::Error parseAttrValue(Attr &a) {
    if (tok_.kind == Tok::String) {
      a = Attr::ofString(tok_.str);
      advance();
      return llvm::Error::success();
    }
    if (isWord("ints") && nextIs(Tok::LSquare)) {
      advance();
      a = Attr::ofInts({});
      return parseList("ints list", [&]() -> llvm::Error {
        int64_t v = 0;
        if (auto e = parseInt(v, "an integer")) return e;
        a.ints.push_back(v);
        return llvm::Error::success();
      });
    }
    if (isWord("floats") && nextIs(Tok::LSquare)) {
      advance();
      a = Attr::ofFloats({});
      return parseList("floats list", [&]() -> llvm::Error {
        double v = 0;
        if (auto e = parseFloat(v, "a floating-point number")) return e;
        a.floats.push_back(float(v));
        return llvm::Error::success();
      });
    }
    if (isWord("strings") && nextIs(Tok::LSquare)) {
      advance();
      a = Attr::ofStrings({});
      return parseList("strings list", [&]() -> llvm::Error {
        if (tok_.kind != Tok::String) return expected("a string");
        a.strings.push_back(tok_.str);
        advance();
        return llvm::Error::success();
      });
    }
    if (isWord("tensor")) {
      advance();
      TensorType type;
      if (auto e = parseType(type, "the tensor attribute's type")) return e;
      if (!isWord("dense")) return expected("dense<...> after the tensor attribute's type");
      Tensor t;
      if (auto e = parseDense(type, t)) return e;
      a = Attr::ofTensor(std::move(t));
      return llvm::Error::success();
    }
    if (tok_.kind == Tok::Word && hasIntSyntax(tok_.text)) {
      int64_t v = 0;
      if (auto e = parseInt(v, "an integer")) return e;
      a = Attr::ofInt(v);
      return llvm::Error::success();
    }
    if (tok_.kind == Tok::Word && hasFloatSyntax(tok_.text)) {
      double v = 0;
      if (auto e = parseFloat(v, "a number")) return e;
      a = Attr::ofFloat(float(v));
      return llvm::Error::success();
    }
    return expected("an attribute value (integer, float, string, ints[...], floats[...], strings[...] or tensor)");
  }

  // --- types and literals ---
  llvm::Error parseDType(DType &d, const llvm::Twine &what) {
    if (tok_.kind != Tok::Word) return expected(what);
    if (tok_.text == "undef") {
      d = DType::Undefined;
    } else if (auto parsed = megac::parseDType(std::string_view(tok_.text.data(), tok_.text.size()))) {
      d = *parsed;
    } else {
      return errorAt(tok_.offset, "unknown element type '" + tok_.text +
                                      "' (expected f32, f64, f16, bf16, i8..i64, u8..u64, bool, string or undef)");
    }
    advance();
    return llvm::Error::success();
  }

  llvm::Error parseType(TensorType &t, const llvm::Twine &what) {
    if (tok_.kind != Tok::Word) return expected(what);
    if (isWord("seq") && nextIs(Tok::Less)) {
      advance();
      advance();
      t.isSequence = true;
      if (auto e = parseDType(t.dtype, "the sequence's element type")) return e;
      return expect(Tok::Greater, "'>' to close seq<...>");
    }
    if (auto e = parseDType(t.dtype, what)) return e;
    int64_t elements = 1;
    return parseList("shape", [&]() -> llvm::Error {
      size_t at = tok_.offset;
      int64_t d;
      if (auto e = parseInt(d, "a dimension size")) return e;
      if (d < 0) return errorAt(at, "dimension size cannot be negative");
      // Keep the byte size of any tensor of this shape representable.
      if (d && elements > (std::numeric_limits<int64_t>::max() / 16) / d)
        return errorAt(at, "shape has too many elements");
      elements *= d;
      t.shape.push_back(d);
      return llvm::Error::success();
    });
  }

  // `dense<...>` for a tensor of type `type`; the current token is `dense`.
  llvm::Error parseDense(const TensorType &type, Tensor &out) {
    size_t at = tok_.offset;
    advance(); // 'dense'
    if (auto e = expect(Tok::Less, "'<' after 'dense'")) return e;
    if (tok_.kind == Tok::Word && tok_.text.startswith("..."))
      return errorAt(tok_.offset, "elided constant cannot be parsed (it was printed with large constants elided)");
    if (type.isSequence) return errorAt(at, "a sequence cannot have a dense literal");
    if (type.dtype == DType::Undefined || dtypeSize(type.dtype) == 0)
      return errorAt(at, "a dense literal needs a numeric element type, not " + type.str());
    int64_t n = numElements(type.shape);
    size_t nbytes = size_t(n) * dtypeSize(type.dtype);
    if (tok_.kind == Tok::Word && (tok_.text.startswith("0x") || tok_.text.startswith("0X"))) {
      if (auto e = parseHexBytes(type, nbytes, out)) return e;
    } else if (tok_.kind == Tok::LSquare) {
      std::vector<Token> elems;
      if (auto e = parseList("literal", [&]() -> llvm::Error {
            if (tok_.kind != Tok::Word) return expected("a number");
            elems.push_back(tok_);
            advance();
            return llvm::Error::success();
          }))
        return e;
      if (int64_t(elems.size()) != n && !(elems.size() == 1 && n > 0))
        return errorAt(at, "dense literal has " + llvm::Twine(elems.size()) + " elements but " + type.str() +
                               " has " + llvm::Twine(n));
      if (auto e = fillDecimal(type, elems, out)) return e;
    } else if (tok_.kind == Tok::Word) {
      if (n == 0) return errorAt(tok_.offset, type.str() + " has no elements; write dense<[]>");
      std::vector<Token> elems{tok_};
      advance();
      if (auto e = fillDecimal(type, elems, out)) return e;
    } else {
      return expected("a number, a [list] or 0x hex bytes in dense<...>");
    }
    return expect(Tok::Greater, "'>' to close dense<...>");
  }

  llvm::Error parseHexBytes(const TensorType &type, size_t nbytes, Tensor &out) {
    llvm::StringRef digits = tok_.text.drop_front(2);
    if (digits.size() % 2)
      return errorAt(tok_.offset, "hex literal has an odd number of digits (" + llvm::Twine(digits.size()) + ")");
    if (digits.size() / 2 != nbytes)
      return errorAt(tok_.offset, "hex literal has " + llvm::Twine(digits.size() / 2) + " bytes but " + type.str() +
                                      " needs " + llvm::Twine(nbytes));
    for (size_t i = 0; i < digits.size(); ++i)
      if (hexDigit(digits[i]) < 0)
        return errorAt(tok_.offset + 2 + i, "invalid hex digit " + describeChar(digits[i]));
    out = Tensor(type.dtype, type.shape);
    uint8_t *p = static_cast<uint8_t *>(out.raw());
    for (size_t i = 0; i < nbytes; ++i) p[i] = uint8_t(hexDigit(digits[2 * i]) * 16 + hexDigit(digits[2 * i + 1]));
    advance();
    return llvm::Error::success();
  }

  // Decimal elements; a single element for several is a splat.
  llvm::Error fillDecimal(const TensorType &type, const std::vector<Token> &elems, Tensor &out) {
    static constexpr size_t kMaxSplatBytes = size_t(1) << 32;
    int64_t n = numElements(type.shape);
    size_t width = dtypeSize(type.dtype);
    if (size_t(n) * width > kMaxSplatBytes)
      return errorAt(elems[0].offset, "splat constant of " + type.str() + " is too large to materialize");
    out = Tensor(type.dtype, type.shape);
    uint8_t *p = static_cast<uint8_t *>(out.raw());
    for (size_t i = 0; i < elems.size(); ++i)
      if (auto e = storeElement(type.dtype, elems[i], p + i * width)) return e;
    for (int64_t i = int64_t(elems.size()); i < n; ++i) std::memcpy(p + size_t(i) * width, p, width);
    return llvm::Error::success();
  }

  llvm::Error storeElement(DType d, const Token &t, uint8_t *dst) {
    llvm::StringRef w = t.text;
    auto store = [&](auto v) {
      std::memcpy(dst, &v, sizeof v);
      return llvm::Error::success();
    };
    if (isFloatType(d)) {
      if (!hasFloatSyntax(w)) return errorAt(t.offset, "expected a number for " + llvm::Twine(dtypeName(d)) + ", got '" + w + "'");
      double v = floatValue(w);
      switch (d) {
      case DType::F64: return store(v);
      case DType::F32: return store(float(v));
      case DType::F16: return store(floatToHalf(float(v)));
      default: return store(floatToBf16(float(v)));
      }
    }
    if (d == DType::Bool) {
      if (w == "0" || w == "false") return store(uint8_t(0));
      if (w == "1" || w == "true") return store(uint8_t(1));
      return errorAt(t.offset, "expected 0 or 1 for bool, got '" + w + "'");
    }
    if (!hasIntSyntax(w))
      return errorAt(t.offset, "expected an integer for " + llvm::Twine(dtypeName(d)) + ", got '" + w + "'");
    auto outOfRange = [&] { return errorAt(t.offset, w + " is out of range for " + dtypeName(d)); };
    if (d == DType::U64) {
      uint64_t v;
      if (w.startswith("-") || (w.startswith("+") ? w.drop_front() : w).getAsInteger(10, v)) return outOfRange();
      return store(v);
    }
    int64_t v = 0;
    if (!intValue(w, v)) return outOfRange();
    auto fits = [&](auto zero) {
      using T = decltype(zero);
      return v >= int64_t(std::numeric_limits<T>::min()) && v <= int64_t(std::numeric_limits<T>::max());
    };
    switch (d) {
    case DType::I8: return fits(int8_t()) ? store(int8_t(v)) : outOfRange();
    case DType::I16: return fits(int16_t()) ? store(int16_t(v)) : outOfRange();
    case DType::I32: return fits(int32_t()) ? store(int32_t(v)) : outOfRange();
    case DType::I64: return store(v);
    case DType::U8: return fits(uint8_t()) ? store(uint8_t(v)) : outOfRange();
    case DType::U16: return fits(uint16_t()) ? store(uint16_t(v)) : outOfRange();
    case DType::U32: return fits(uint32_t()) ? store(uint32_t(v)) : outOfRange();
    default: return errorAt(t.offset, "cannot write a " + llvm::Twine(dtypeName(d)) + " literal");
    }
  }

  // --- name resolution (values may be used before their definition) ---
  struct Use {
    std::string name;
    size_t offset = 0;
    size_t input = 0;
    int64_t op = -1; // -1: a graph output
  };

  llvm::Expected<ValueId> resolve(const Use &u) const {
    ValueId id = g_->lookup(u.name);
    if (id == kNoValue) return errorAt(u.offset, "use of undefined value %" + printableName(u.name));
    return id;
  }

  llvm::Error resolveUses() {
    for (const Use &u : inputUses_) {
      auto id = resolve(u);
      if (!id) return id.takeError();
      g_->ops[size_t(u.op)].inputs[u.input] = *id;
    }
    for (const Use &u : outputUses_) {
      auto id = resolve(u);
      if (!id) return id.takeError();
      g_->outputs.push_back(*id);
    }
    return llvm::Error::success();
  }

  Lexer lexer_;
  llvm::StringRef text_;
  llvm::StringRef source_;
  Token tok_, next_;
  std::unique_ptr<Graph> g_;
  llvm::StringMap<size_t> definedAt_;
  std::vector<Use> inputUses_, outputUses_;
};

} // namespace

llvm::Expected<std::unique_ptr<Graph>> parseGraph(llvm::StringRef text, llvm::StringRef source) {
  return Parser(text, source).parse();
}

} // namespace megac::ir
