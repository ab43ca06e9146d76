#include "passes/SymbolicMask.h"

#include "runtime/cpu/Kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace megac::passes {

using namespace ir;

bool symbolicMaskOp(const std::string &opType) { return opType == "Trilu" || opType == "ConstantOfShape"; }

namespace {

constexpr int64_t kMinD = std::numeric_limits<int64_t>::min() / 4, kMaxD = std::numeric_limits<int64_t>::max() / 4;

// A value of the mask's computation, as a function of (i, j).
struct Sym {
  bool affine = true;
  double a = 0, b = 0, c = 0; // affine: a*i + b*j + c
  // Step function of d = j - i: piece k covers [breaks[k-1], breaks[k]) (the
  // first from -inf, the last to +inf); values.size() == breaks.size() + 1.
  std::vector<int64_t> breaks;
  std::vector<double> values;

  static Sym constant(double x) { return Sym{true, 0, 0, x, {}, {}}; }
  static Sym steps(std::vector<int64_t> br, std::vector<double> v) { return Sym{false, 0, 0, 0, std::move(br), std::move(v)}; }
  bool isConstant() const { return affine && a == 0 && b == 0; }
  // A step function, where it is one (a constant is a single piece).
  std::optional<Sym> asSteps() const {
    if (!affine) return *this;
    if (isConstant()) return steps({}, {c});
    return std::nullopt;
  }
  double at(size_t piece) const { return values[piece]; }
};

// The union of several step functions' breakpoints, and for each piece of
// it the piece of each function it lies in.
struct Merged {
  std::vector<int64_t> breaks;
  std::vector<std::vector<size_t>> pieceOf; // [piece][function]
};

Merged merge(const std::vector<Sym> &fs) {
  Merged m;
  for (const Sym &f : fs) m.breaks.insert(m.breaks.end(), f.breaks.begin(), f.breaks.end());
  std::sort(m.breaks.begin(), m.breaks.end());
  m.breaks.erase(std::unique(m.breaks.begin(), m.breaks.end()), m.breaks.end());
  for (size_t p = 0; p <= m.breaks.size(); ++p) {
    // A point inside piece p: its start (or below the first break).
    const int64_t x = p == 0 ? (m.breaks.empty() ? 0 : m.breaks[0] - 1) : m.breaks[p - 1];
    std::vector<size_t> of;
    for (const Sym &f : fs) of.push_back(size_t(std::upper_bound(f.breaks.begin(), f.breaks.end(), x) - f.breaks.begin()));
    m.pieceOf.push_back(std::move(of));
  }
  return m;
}

// Adjacent pieces of equal value become one.
Sym simplify(Sym s) {
  Sym out = Sym::steps({}, {s.values[0]});
  for (size_t k = 0; k < s.breaks.size(); ++k) {
    if (s.values[k + 1] == out.values.back()) continue;
    out.breaks.push_back(s.breaks[k]);
    out.values.push_back(s.values[k + 1]);
  }
  return out;
}

class Reader {
public:
  Reader(Graph &g, int64_t qSeq, int64_t kvSeq) : g_(g), qSeq_(qSeq), kvSeq_(kvSeq) {}

  std::optional<Sym> read(ValueId v) {
    if (auto it = memo_.find(v); it != memo_.end()) return it->second;
    if (++ops_ > kMaxOps) return std::nullopt;
    std::optional<Sym> s = g_.constValue(v) ? leaf(*g_.constValue(v)) : computed(v);
    memo_.emplace(v, s);
    return s;
  }

private:
  static constexpr int kMaxOps = 256;

  // A constant: uniform, or affine along the rows or along the keys (every
  // other dim uniform), checked entry by entry (it is at most the fold limit).
  std::optional<Sym> leaf(const Tensor &t) {
    if (t.numel() == 0 || t.rank() > 4) return std::nullopt;
    const Shape &s = t.shape();
    const int64_t keys = t.rank() >= 1 ? s.back() : 1, rows = t.rank() >= 2 ? s[s.size() - 2] : 1;
    const int64_t slice = keys * rows;
    // Every leading (batch, head) slice equal to the first.
    for (int64_t o = slice; o < t.numel(); ++o)
      if (t.getAsDouble(o) != t.getAsDouble(o % slice)) return std::nullopt;
    if (rows > 1 && keys > 1) return std::nullopt; // a function of both: only a constant mask, read elsewhere
    const int64_t n = std::max(rows, keys);
    const double first = t.getAsDouble(0), step = n > 1 ? t.getAsDouble(1) - first : 0;
    for (int64_t k = 0; k < n; ++k)
      if (t.getAsDouble(k) != first + step * double(k)) return std::nullopt;
    if (n == 1 || step == 0) return Sym::constant(first);
    if (rows > 1 && rows != qSeq_) return std::nullopt; // broadcast along some other dim
    if (keys > 1 && keys != kvSeq_) return std::nullopt;
    Sym r = Sym::constant(first);
    (rows > 1 ? r.a : r.b) = step;
    return r;
  }

  std::optional<Sym> computed(ValueId v) {
    const Value &val = g_.value(v);
    if (val.producer < 0 || !val.type.known() || val.type.isSequence) return std::nullopt;
    const Op &op = g_.ops[size_t(val.producer)];
    if (op.dead || op.outputs.size() != 1 || !(elementwiseMaskOp(op.type) || symbolicMaskOp(op.type))) return std::nullopt;
    const std::string &t = op.type;
    if (t == "ConstantOfShape") {
      const Attr *value = op.attrs.get("value");
      if (!value) return Sym::constant(0);
      if (value->kind != Attr::Kind::Tensor || value->t.numel() != 1) return std::nullopt;
      return Sym::constant(value->t.getAsDouble(0));
    }
    if (op.inputs.empty() || op.inputs[0] == kNoValue) return std::nullopt;
    if (t == "Identity" || t == "Expand") return read(op.inputs[0]);
    std::vector<Sym> in;
    for (ValueId x : op.inputs) {
      if (x == kNoValue) return std::nullopt;
      auto s = read(x);
      if (!s) return std::nullopt;
      in.push_back(*s);
    }
    if (t == "Trilu") return trilu(op, in);
    // Affine arithmetic keeps the form.
    const bool allAffine = std::all_of(in.begin(), in.end(), [](const Sym &s) { return s.affine; });
    const bool anyVarying = std::any_of(in.begin(), in.end(), [](const Sym &s) { return !s.isConstant(); });
    if (allAffine && anyVarying) {
      if (t == "Add" || t == "Sub") {
        const double sign = t == "Add" ? 1 : -1;
        return Sym{true, in[0].a + sign * in[1].a, in[0].b + sign * in[1].b, in[0].c + sign * in[1].c, {}, {}};
      }
      if (t == "Neg") return Sym{true, -in[0].a, -in[0].b, -in[0].c, {}, {}};
      if (t == "Mul" && (in[0].isConstant() || in[1].isConstant())) {
        const Sym &k = in[0].isConstant() ? in[0] : in[1], &x = in[0].isConstant() ? in[1] : in[0];
        return Sym{true, x.a * k.c, x.b * k.c, x.c * k.c, {}, {}};
      }
      if (t == "Cast") return integral(in[0]) && !isBool(g_.type(v).dtype) ? std::optional<Sym>(in[0]) : std::nullopt;
      if (t == "Less" || t == "LessOrEqual" || t == "Greater" || t == "GreaterOrEqual" || t == "Equal")
        return compare(t, in[0], in[1]);
      return std::nullopt;
    }
    // Otherwise every input is a step function: the op piece by piece.
    std::vector<Sym> steps;
    for (const Sym &s : in) {
      auto st = s.asSteps();
      if (!st) return std::nullopt;
      steps.push_back(*st);
    }
    return piecewise(op, v, steps);
  }

  static bool integral(const Sym &s) {
    return std::floor(s.a) == s.a && std::floor(s.b) == s.b && std::floor(s.c) == s.c;
  }
  static bool isBool(DType d) { return d == DType::Bool; }

  // x OP y for affine x, y: a step function of d where i's and j's
  // coefficients cancel, a constant where the comparison is the same over the
  // whole range of the index it depends on; else not recognized.
  std::optional<Sym> compare(const std::string &t, const Sym &x, const Sym &y) {
    // diff = x - y = A*i + B*j + C; the comparison is diff OP 0.
    const double A = x.a - y.a, B = x.b - y.b, C = x.c - y.c;
    auto holds = [&](double diff) {
      if (t == "Less") return diff < 0;
      if (t == "LessOrEqual") return diff <= 0;
      if (t == "Greater") return diff > 0;
      if (t == "GreaterOrEqual") return diff >= 0;
      return diff == 0;
    };
    if (A == 0 && B == 0) return Sym::constant(holds(C));
    if (A == -B) {
      // diff = B*d + C, monotone in d: the set where it holds is a run of
      // integers, found by the boundary of B*d + C = 0.
      if (!integral(Sym{true, A, B, C, {}, {}})) return std::nullopt;
      const double root = -C / B; // diff is 0 here
      const int64_t lo = int64_t(std::floor(root)) - 1, hi = int64_t(std::ceil(root)) + 1;
      // Truth at every integer of [lo, hi]; it is constant below lo and above hi.
      std::vector<int64_t> breaks;
      std::vector<double> values{double(holds(B * double(lo - 1) + C))};
      for (int64_t d = lo; d <= hi + 1; ++d) {
        const double v = holds(B * double(d) + C);
        if (v != values.back()) {
          breaks.push_back(d);
          values.push_back(v);
        }
      }
      return Sym::steps(std::move(breaks), std::move(values));
    }
    if (A != 0 && B != 0) return std::nullopt;
    // One index alone, over its range [0, n): a constant only where the
    // comparison agrees everywhere. It is monotone, so its ends decide; Equal
    // holds at one point, the root, if that is an index in the range.
    const int64_t n = A != 0 ? qSeq_ : kvSeq_;
    const double k = A != 0 ? A : B;
    if (t == "Equal") {
      const double root = -C / k;
      const bool hit = std::floor(root) == root && root >= 0 && root <= double(n - 1);
      if (!hit) return Sym::constant(0);
      return n == 1 ? std::optional<Sym>(Sym::constant(1)) : std::nullopt;
    }
    const bool first = holds(C), last = holds(k * double(n - 1) + C);
    if (first != last) return std::nullopt;
    return Sym::constant(first);
  }

  // Trilu of a step function: the entries with d >= k (upper) or d <= k (lower) kept, the rest 0.
  std::optional<Sym> trilu(const Op &op, const std::vector<Sym> &in) {
    auto x = in[0].asSteps();
    if (!x) return std::nullopt;
    int64_t k = 0;
    if (in.size() > 1) {
      if (!in[1].isConstant()) return std::nullopt;
      k = int64_t(in[1].c);
    }
    const bool upper = op.attrs.getInt("upper", 1) != 0;
    const Sym keep = upper ? Sym::steps({k}, {0, 1}) : Sym::steps({k + 1}, {1, 0});
    Merged m = merge({*x, keep});
    Sym out = Sym::steps(m.breaks, {});
    for (const auto &of : m.pieceOf) out.values.push_back(keep.at(of[1]) != 0 ? x->at(of[0]) : 0.0);
    return simplify(out);
  }

  // An elementwise op on step functions: the op's CPU kernel on one scalar per input and piece.
  std::optional<Sym> piecewise(const Op &op, ValueId v, const std::vector<Sym> &in) {
    if (!cpu::lookupKernel(op.type)) return std::nullopt;
    Merged m = merge(in);
    Sym out = Sym::steps(m.breaks, {});
    for (const auto &of : m.pieceOf) {
      std::vector<Tensor> scalars;
      for (size_t k = 0; k < in.size(); ++k) {
        Tensor s(g_.type(op.inputs[k]).dtype, Shape{});
        s.setFromDouble(0, in[k].at(of[k]));
        scalars.push_back(std::move(s));
      }
      std::vector<const Tensor *> ptrs;
      for (const Tensor &s : scalars) ptrs.push_back(&s);
      Tensor r(g_.type(v).dtype, Shape{});
      cpu::KernelContext ctx{op.attrs, ptrs, {&r}};
      if (auto e = cpu::runKernel(op.type, ctx)) {
        llvm::consumeError(std::move(e));
        return std::nullopt;
      }
      out.values.push_back(r.getAsDouble(0));
    }
    return simplify(out);
  }

  Graph &g_;
  const int64_t qSeq_, kvSeq_;
  std::map<ValueId, std::optional<Sym>> memo_;
  int ops_ = 0;
};

} // namespace

std::optional<MaskFacts> symbolicMaskFacts(Graph &g, ValueId v, MaskKind kind, int64_t qSeq, int64_t kvSeq) {
  if (v == kNoValue || !g.type(v).known() || qSeq < 1 || kvSeq < 1) return std::nullopt;
  // Only ops the recognizer reads (Expand's shape input aside): the row and
  // key dims stay the last two throughout.
  const Shape &shape = g.type(v).shape;
  if (shape.size() > 4 || (shape.size() >= 2 && shape[shape.size() - 2] != qSeq && shape[shape.size() - 2] != 1) ||
      (!shape.empty() && shape.back() != kvSeq && shape.back() != 1))
    return std::nullopt;
  Reader r(g, qSeq, kvSeq);
  auto sym = r.read(v);
  if (!sym) return std::nullopt;
  auto steps = sym->asSteps();
  if (!steps) return std::nullopt;
  // Over the domain: query i in [0, qSeq), key j in [0, kvSeq), so d in [-(qSeq-1), kvSeq-1].
  MaskFacts facts;
  std::vector<std::pair<int64_t, int64_t>> seenRows; // rows that see some key
  for (size_t p = 0; p < steps->values.size(); ++p) {
    int64_t lo = p == 0 ? kMinD : steps->breaks[p - 1], hi = p == steps->breaks.size() ? kMaxD : steps->breaks[p] - 1;
    lo = std::max(lo, -(qSeq - 1));
    hi = std::min(hi, kvSeq - 1);
    if (lo > hi) continue;
    const double x = steps->values[p];
    if (!kind.visible(x)) facts.allVisible = false;
    // Causal: visible exactly at d <= 0 (a square mask: the queries align with the keys).
    if (lo <= 0 && !kind.visible(x)) facts.causal = false;
    if (hi > 0 && !kind.masked(x)) facts.causal = false;
    // Query i sees keys with d in [-i, kvSeq-1-i]: this piece serves rows [-hi, kvSeq-1-lo].
    if (!kind.fullyMasked(x)) seenRows.push_back({std::max<int64_t>(0, -hi), std::min(qSeq - 1, kvSeq - 1 - lo)});
  }
  if (qSeq != kvSeq) facts.causal = false;
  std::sort(seenRows.begin(), seenRows.end());
  int64_t covered = 0; // rows [0, covered) see some key
  for (auto [from, to] : seenRows)
    if (from <= covered) covered = std::max(covered, to + 1);
  facts.fullyMaskedRow = covered < qSeq;
  return facts;
}

} // namespace megac::passes
