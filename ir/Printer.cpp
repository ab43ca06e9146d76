#include "ir/Printer.h"

#include "llvm/Support/Format.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace megac::ir {

static bool isBareChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' || c == '/' || c == '-';
}

static void printQuoted(llvm::StringRef s, llvm::raw_ostream &os) {
  os << '"';
  for (char c : s) {
    if (c == '"' || c == '\\') os << '\\' << c;
    else if (c == '\n') os << "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) os << llvm::format("\\x%02x", static_cast<unsigned char>(c));
    else os << c;
  }
  os << '"';
}

std::string printableName(llvm::StringRef name) {
  bool bare = !name.empty();
  for (char c : name) bare &= isBareChar(c);
  if (bare) return name.str();
  std::string s;
  llvm::raw_string_ostream os(s);
  printQuoted(name, os);
  return os.str();
}

// An op type or attribute name: like printableName, but also quoted when it
// starts with ':' or '/', which cannot start a bare word ("//" starts a comment).
static std::string printableSymbol(llvm::StringRef name) {
  if (!name.empty() && (name[0] == ':' || name[0] == '/')) {
    std::string s;
    llvm::raw_string_ostream os(s);
    printQuoted(name, os);
    return os.str();
  }
  return printableName(name);
}

// Shortest text that parses back to the same float.
static void printFloat(double v, bool isF32, llvm::raw_ostream &os) {
  if (std::isnan(v)) { os << (std::signbit(v) ? "-nan" : "nan"); return; }
  if (std::isinf(v)) { os << (v < 0 ? "-inf" : "inf"); return; }
  char buf[40];
  for (int prec = isF32 ? 6 : 15; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (isF32 ? float(std::strtod(buf, nullptr)) == float(v) : std::strtod(buf, nullptr) == v) break;
  }
  os << buf;
}

// Whether decimal text reads back to the same bits: a NaN reads back as the
// default quiet NaN of its sign, and a bool as 0 or 1.
static bool decimalIsExact(const Tensor &t) {
  DType d = t.dtype();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (d == DType::F32) {
      float f = t.data<float>()[i];
      float q = std::copysign(std::numeric_limits<float>::quiet_NaN(), f);
      if (std::isnan(f) && std::memcmp(&f, &q, sizeof f) != 0) return false;
    } else if (d == DType::F64) {
      double f = t.data<double>()[i];
      double q = std::copysign(std::numeric_limits<double>::quiet_NaN(), f);
      if (std::isnan(f) && std::memcmp(&f, &q, sizeof f) != 0) return false;
    } else if (d == DType::Bool && t.data<uint8_t>()[i] > 1) {
      return false;
    }
  }
  return true;
}

void printTensorLiteral(const Tensor &t, llvm::raw_ostream &os, const PrintOptions &opts) {
  int64_t n = t.numel();
  if (opts.elideAbove >= 0 && n > opts.elideAbove) {
    os << "dense<...>";
    return;
  }
  DType d = t.dtype();
  bool decimal = n <= opts.decimalUpTo && d != DType::F16 && d != DType::BF16 && decimalIsExact(t);
  os << "dense<";
  if (decimal) {
    // A splat prints once.
    bool splat = n > 1;
    for (int64_t i = 1; i < n && splat; ++i)
      splat = std::memcmp(static_cast<const uint8_t *>(t.raw()) + i * dtypeSize(d), t.raw(), dtypeSize(d)) == 0;
    int64_t shown = splat ? 1 : n;
    if (n != 1 && !splat) os << '[';
    for (int64_t i = 0; i < shown; ++i) {
      if (i) os << ", ";
      if (isFloatType(d)) printFloat(t.getAsDouble(i), d == DType::F32, os);
      else if (d == DType::U64) os << t.data<uint64_t>()[i];
      else os << t.getAsInt(i);
    }
    if (n != 1 && !splat) os << ']';
  } else {
    os << "0x";
    const uint8_t *p = static_cast<const uint8_t *>(t.raw());
    static const char hex[] = "0123456789ABCDEF";
    std::string s(t.nbytes() * 2, '0');
    for (size_t i = 0; i < t.nbytes(); ++i) {
      s[2 * i] = hex[p[i] >> 4];
      s[2 * i + 1] = hex[p[i] & 15];
    }
    os << s;
  }
  os << '>';
}

void printAttr(const Attr &a, llvm::raw_ostream &os, const PrintOptions &opts) {
  auto list = [&](const char *kw, size_t n, auto &&each) {
    os << kw << '[';
    for (size_t i = 0; i < n; ++i) {
      if (i) os << ", ";
      each(i);
    }
    os << ']';
  };
  switch (a.kind) {
  case Attr::Kind::Int: os << a.i; break;
  case Attr::Kind::Float: {
    // Always with a '.', 'e', "inf" or "nan", so it never reads as an int.
    std::string f;
    llvm::raw_string_ostream fs(f);
    printFloat(a.f, true, fs);
    fs.flush();
    if (f.find_first_of(".eniEN") == std::string::npos) f += ".0";
    os << f;
    break;
  }
  case Attr::Kind::String: printQuoted(a.s, os); break;
  case Attr::Kind::Ints: list("ints", a.ints.size(), [&](size_t i) { os << a.ints[i]; }); break;
  case Attr::Kind::Floats: list("floats", a.floats.size(), [&](size_t i) { printFloat(a.floats[i], true, os); }); break;
  case Attr::Kind::Strings: list("strings", a.strings.size(), [&](size_t i) { printQuoted(a.strings[i], os); }); break;
  case Attr::Kind::Tensor:
    os << "tensor " << dtypeName(a.t.dtype()) << shapeToString(a.t.shape()) << ' ';
    printTensorLiteral(a.t, os, opts);
    break;
  }
}

static void printType(const TensorType &t, llvm::raw_ostream &os) { os << t.str(); }

void printGraph(const Graph &g, llvm::raw_ostream &os, const PrintOptions &opts) {
  os << "graph @" << printableName(g.name) << " opset " << g.opset << " {\n";
  // Inputs, then initializers, in value order.
  for (ValueId id : g.inputs) {
    const Value &v = g.value(id);
    os << "  %" << printableName(v.name) << " = input ";
    printType(v.type, os);
    os << '\n';
  }
  for (const Value &v : g.values) {
    if (!v.isInitializer()) continue;
    os << "  %" << printableName(v.name) << " = " << (v.kind == ValueKind::Param ? "param " : "const ");
    printType(v.type, os);
    if (v.frozen) os << " frozen";
    if (v.data) {
      os << ' ';
      printTensorLiteral(*v.data, os, opts);
    } else if (v.external) {
      os << " external(";
      printQuoted(v.external->location, os);
      os << ", " << v.external->offset << ", " << v.external->length << ')';
    } else {
      os << " nodata";
    }
    os << '\n';
  }
  for (const Op &op : g.ops) {
    if (op.dead) continue;
    os << "  ";
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      if (i) os << ", ";
      if (op.outputs[i] == kNoValue) os << '_';
      else os << '%' << printableName(g.value(op.outputs[i]).name);
    }
    if (!op.outputs.empty()) os << " = ";
    os << printableSymbol(op.type) << '(';
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      if (i) os << ", ";
      if (op.inputs[i] == kNoValue) os << '_';
      else os << '%' << printableName(g.value(op.inputs[i]).name);
    }
    os << ')';
    if (!op.attrs.empty()) {
      os << " {";
      bool first = true;
      for (const auto &kv : op.attrs.all()) {
        if (!first) os << ", ";
        first = false;
        os << printableSymbol(kv.first) << " = ";
        printAttr(kv.second, os, opts);
      }
      os << '}';
    }
    os << " :";
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      os << (i ? ", " : " ");
      if (op.outputs[i] == kNoValue) os << '_';
      else printType(g.type(op.outputs[i]), os);
    }
    if (!op.name.empty()) {
      os << " loc(";
      printQuoted(op.name, os);
      os << ')';
    }
    os << '\n';
  }
  os << "  return ";
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    if (i) os << ", ";
    os << '%' << printableName(g.value(g.outputs[i]).name);
  }
  os << "\n}\n";
}

std::string graphToString(const Graph &g, const PrintOptions &opts) {
  std::string s;
  llvm::raw_string_ostream os(s);
  printGraph(g, os, opts);
  return os.str();
}

} // namespace megac::ir
