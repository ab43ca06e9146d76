// fuse-rmsnorm: rewrites RMS normalization written as separate ops,
//     y = w * (x / Sqrt(ReduceMean(x^2, axes, keepdims = 1) + eps))
// into RMSNormalization(x, w) {axis, epsilon} (opset 23 semantics), so that
// the runtimes run one kernel forward and one backward. Recognized forms:
// - x^2 as Pow(x, 2) or Mul(x, x);
// - the division as Mul(x, Reciprocal(Sqrt(.))) (torch's rsqrt), in either
//   operand order, or Div(x, Sqrt(.));
// - eps on either side of the Add; w on either side of the last Mul;
// - x as Cast(h) to f32 with the normalized value cast back to h's dtype
//   before the weight (half-precision models): RMSNormalization computes in
//   f32 (stash_type 1) and gives Y in h's dtype.
// The axes must be the trailing dims (axis is then the first of them), w
// must broadcast to x without changing its shape, eps must be a scalar
// constant and every intermediate value must be used by the chain alone;
// anything else stays as it is. Matching looks at structure and folded
// constants only (run specialize first), never at names.
#include "passes/Match.h"
#include "passes/Pass.h"
#include "runtime/cpu/NormAttentionShapes.h"

#include <cmath>

namespace megac::passes {

using namespace ir;

namespace {

struct RMSNormMatch {
  ValueId y = kNoValue; // the weight product's result, which RMSNormalization takes over
  ValueId x = kNoValue, w = kNoValue;
  int64_t axis = -1;
  double epsilon = 0;
  bool stashF64 = false; // the statistics are computed in f64
};

bool isComputeType(DType t) { return t == DType::F32 || t == DType::F64; }

class RMSNormMatcher {
public:
  explicit RMSNormMatcher(Graph &g) : m_(g) {}
  std::optional<RMSNormMatch> match(const Op &mul);

private:
  bool normalized(ValueId n, const Op *user, ValueId &xf, RMSNormMatch &r);
  bool meanSquare(ValueId v, const Op *user, ValueId xf, RMSNormMatch &r);
  std::optional<int64_t> trailingAxis(const Op &mean, int64_t rank);

  Matcher m_;
};

// The axes of a ReduceMean (attribute before opset 18, input after) as the
// first of the trailing dims they name; nullopt if they are not trailing.
std::optional<int64_t> RMSNormMatcher::trailingAxis(const Op &mean, int64_t rank) {
  std::vector<int64_t> axes;
  if (mean.inputs.size() >= 2 && mean.inputs[1] != kNoValue) {
    const Tensor *t = m_.graph().constValue(mean.inputs[1]);
    if (!t || !isIntegerType(t->dtype())) return std::nullopt;
    axes = t->toInt64Vector();
  } else {
    axes = mean.attrs.getInts("axes");
  }
  if (axes.empty() || rank == 0) return std::nullopt; // all axes (or none): not this pattern
  std::vector<bool> seen(size_t(rank), false);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) return std::nullopt;
    if (a < 0) a += rank;
    if (seen[size_t(a)]) return std::nullopt;
    seen[size_t(a)] = true;
  }
  int64_t first = rank - int64_t(axes.size());
  for (int64_t d = first; d < rank; ++d)
    if (!seen[size_t(d)]) return std::nullopt;
  return first;
}

// v = ReduceMean(x^2, trailing axes, keepdims = 1), used by `user` alone.
bool RMSNormMatcher::meanSquare(ValueId v, const Op *user, ValueId xf, RMSNormMatch &r) {
  const Op *mean = m_.def(v);
  if (!mean || mean->type != "ReduceMean" || mean->outputs.size() != 1 || mean->inputs.empty() ||
      !m_.onlyUsedBy(v, user))
    return false;
  if (mean->attrs.getInt("keepdims", 1) != 1 || mean->attrs.getInt("noop_with_empty_axes", 0) != 0) return false;
  const int64_t rank = int64_t(m_.shape(xf).size());
  auto axis = trailingAxis(*mean, rank);
  if (!axis) return false;
  r.axis = *axis - rank; // negative: counted from the end, as torch's dim=-1
  ValueId sq = mean->inputs[0];
  if (!m_.onlyUsedBy(sq, mean) || m_.type(sq) != m_.type(xf)) return false;
  if (const Op *pow = m_.defOf(sq, "Pow", 2)) {
    auto e = m_.scalarConst(pow->inputs[1]);
    return pow->inputs[0] == xf && e && *e == 2;
  }
  const Op *mul = m_.defOf(sq, "Mul", 2);
  return mul && mul->inputs[0] == xf && mul->inputs[1] == xf;
}

// n = xf * Reciprocal(Sqrt(a)) or xf / Sqrt(a), a = mean + eps; finds xf.
bool RMSNormMatcher::normalized(ValueId n, const Op *user, ValueId &xf, RMSNormMatch &r) {
  const Op *op = m_.def(n);
  if (!op || !m_.onlyUsedBy(n, user) || op->inputs.size() != 2 || op->outputs.size() != 1) return false;
  ValueId sqrtOut = kNoValue;
  const Op *consumer = op; // the op that uses the Sqrt's result
  if (op->type == "Div") {
    xf = op->inputs[0];
    sqrtOut = op->inputs[1];
  } else if (op->type == "Mul") {
    for (int side : {1, 0}) {
      const Op *rec = m_.defOf(op->inputs[size_t(side)], "Reciprocal", 1);
      if (!rec || !m_.onlyUsedBy(op->inputs[size_t(side)], op)) continue;
      xf = op->inputs[size_t(1 - side)];
      sqrtOut = rec->inputs[0];
      consumer = rec;
      break;
    }
  }
  if (sqrtOut == kNoValue || xf == kNoValue || !isComputeType(m_.type(xf).dtype) || m_.type(n) != m_.type(xf))
    return false;
  const Op *sqrt = m_.defOf(sqrtOut, "Sqrt", 1);
  if (!sqrt || !m_.onlyUsedBy(sqrtOut, consumer)) return false;
  ValueId sum = sqrt->inputs[0];
  const Op *add = m_.defOf(sum, "Add", 2);
  if (!add || !m_.onlyUsedBy(sum, sqrt) || m_.type(sum) != m_.type(sqrtOut)) return false;
  for (int side : {1, 0}) {
    auto eps = m_.scalarConst(add->inputs[size_t(side)]);
    ValueId mean = add->inputs[size_t(1 - side)];
    if (!eps || !std::isfinite(*eps) || *eps < 0 || m_.type(mean) != m_.type(sum)) continue;
    if (!meanSquare(mean, add, xf, r)) continue;
    r.epsilon = *eps;
    return true;
  }
  return false;
}

std::optional<RMSNormMatch> RMSNormMatcher::match(const Op &mul) {
  if (mul.type != "Mul" || mul.inputs.size() != 2 || mul.outputs.size() != 1) return std::nullopt;
  RMSNormMatch r;
  r.y = mul.outputs[0];
  const TensorType &yt = m_.type(r.y);
  if (!isFloatType(yt.dtype)) return std::nullopt;
  for (int side : {0, 1}) {
    ValueId n = mul.inputs[size_t(1 - side)], w = mul.inputs[size_t(side)];
    if (n == kNoValue || w == kNoValue || m_.type(n) != yt || m_.type(w).dtype != yt.dtype) continue;
    // A cast back from the f32 computation (half-precision models).
    const Op *user = &mul;
    ValueId inner = n;
    const Op *castBack = m_.defOf(n, "Cast", 1);
    if (castBack && m_.onlyUsedBy(n, &mul) && m_.type(castBack->inputs[0]).shape == yt.shape) {
      inner = castBack->inputs[0];
      user = castBack;
    }
    ValueId xf = kNoValue;
    RMSNormMatch trial = r;
    if (!normalized(inner, user, xf, trial)) continue;
    ValueId x = xf;
    if (inner != n) {
      // Cast(x) to the compute type, with x of the result's dtype.
      const Op *castIn = m_.defOf(xf, "Cast", 1);
      if (!castIn || m_.type(castIn->inputs[0]) != yt) continue;
      x = castIn->inputs[0];
    } else if (m_.type(xf) != yt) {
      continue;
    }
    // The weight broadcasts to x as RMSNormalization's scale does.
    if (auto e = cpu::checkNormParam(m_.shape(w), yt.shape, "scale")) {
      llvm::consumeError(std::move(e));
      continue;
    }
    trial.x = x;
    trial.w = w;
    trial.stashF64 = m_.type(xf).dtype == DType::F64;
    return trial;
  }
  return std::nullopt;
}

void rewrite(Graph &g, const RMSNormMatch &m) {
  Op norm;
  norm.type = "RMSNormalization";
  norm.inputs = {m.x, m.w};
  norm.outputs = {m.y};
  norm.attrs.set("axis", Attr::ofInt(m.axis));
  norm.attrs.set("epsilon", Attr::ofFloat(float(m.epsilon)));
  if (m.stashF64) norm.attrs.set("stash_type", Attr::ofInt(int64_t(DType::F64)));
  replaceProducer(g, m.y, std::move(norm));
}

} // namespace

llvm::Error fuseRMSNorm(Graph &g, const PassOptions &) {
  std::vector<RMSNormMatch> matches;
  {
    RMSNormMatcher matcher(g);
    for (const Op &op : g.ops)
      if (!op.dead && op.type == "Mul")
        if (auto m = matcher.match(op)) matches.push_back(*m);
  }
  if (matches.empty()) return llvm::Error::success();
  for (const RMSNormMatch &m : matches) rewrite(g, m);
  markUnusedOpsDead(g, g.outputs);
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
