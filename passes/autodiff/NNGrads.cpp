// Gradient rules of the NN layers: MatMul, Gemm, Softmax, LogSoftmax,
// LayerNormalization, RMSNormalization, Attention and RotaryEmbedding.
// Products are composed from Gemm/MatMul/Transpose; the norms, softmax and
// attention use fused megac.*Grad ops (ir/ops/NNGradOps.cpp).
#include "passes/autodiff/Autodiff.h"

#include <numeric>

namespace megac::autodiff {

namespace {

ValueId reshape(GradContext &c, ValueId x, const Shape &to) {
  if (c.failed() || x == ir::kNoValue || c.shape(x) == to) return x;
  return c.op("Reshape", {x, c.int64s(to)});
}

// Swaps the last two dims.
ValueId transposeLast2(GradContext &c, ValueId x) {
  if (c.failed()) return x;
  std::vector<int64_t> perm(c.shape(x).size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  Attrs a;
  a.set("perm", Attr::ofInts(perm));
  return c.op("Transpose", {x}, a);
}

ValueId gemm(GradContext &c, ValueId a, ValueId b, bool transA, bool transB, float alpha = 1.0f) {
  Attrs at;
  if (transA) at.set("transA", Attr::ofInt(1));
  if (transB) at.set("transB", Attr::ofInt(1));
  if (alpha != 1.0f) at.set("alpha", Attr::ofFloat(alpha));
  return c.op("Gemm", {a, b}, at);
}

Shape broadcastBatch(const Shape &a, const Shape &b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1, db = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

// Y = A @ B (numpy): dA = dY @ B^T and dB = A^T @ dY, summed over the batch
// dims each operand was broadcast along; 1-D operands act as [1,K] / [K,1].
void matMulGrad(GradContext &c) {
  ValueId a = c.input(0), b = c.input(1), dy = c.gradOutput(0);
  const Shape as = c.shape(a), bs = c.shape(b);
  if (as.empty() || bs.empty()) return c.unsupported("MatMul of a scalar");
  const int64_t K = as.back();
  if (bs.size() <= 2 && K > 0) {
    // B is a matrix (or vector): fold A's leading dims into rows and use 2-D
    // Gemm products, with no transposed copies and no batch reduction.
    const int64_t N = bs.size() == 2 ? bs[1] : 1, M = numElements(as) / K;
    ValueId a2 = reshape(c, a, {M, K}), b2 = reshape(c, b, {K, N}), dy2 = reshape(c, dy, {M, N});
    if (c.needsGrad(0)) c.addGrad(0, reshape(c, gemm(c, dy2, b2, false, true), as));
    if (c.needsGrad(1)) c.addGrad(1, reshape(c, gemm(c, a2, dy2, true, false), bs));
    return;
  }
  Shape as2 = as, bs2 = bs;
  if (as2.size() == 1) as2.insert(as2.begin(), 1);
  if (bs2.size() == 1) bs2.push_back(1);
  Shape ys = broadcastBatch(Shape(as2.begin(), as2.end() - 2), Shape(bs2.begin(), bs2.end() - 2));
  ys.push_back(as2[as2.size() - 2]);
  ys.push_back(bs2.back());
  ValueId a2 = reshape(c, a, as2), b2 = reshape(c, b, bs2), dy2 = reshape(c, dy, ys);
  if (c.needsGrad(0)) {
    ValueId g = c.op("MatMul", {dy2, transposeLast2(c, b2)});
    c.addGrad(0, reshape(c, c.sumToShape(g, as2), as));
  }
  if (c.needsGrad(1)) {
    ValueId g = c.op("MatMul", {transposeLast2(c, a2), dy2});
    c.addGrad(1, reshape(c, c.sumToShape(g, bs2), bs));
  }
}

// Y = alpha * op(A) op(B) + beta * C, with op() an optional transpose. Each
// case of dA/dB is a single Gemm with the right transpose flags.
void gemmGrad(GradContext &c) {
  ValueId a = c.input(0), b = c.input(1), dy = c.gradOutput(0);
  const bool tA = c.attrs().getInt("transA", 0) != 0, tB = c.attrs().getInt("transB", 0) != 0;
  const float alpha = c.attrs().getFloat("alpha", 1.0f), beta = c.attrs().getFloat("beta", 1.0f);
  if (c.needsGrad(0)) // op(A)' = dY op(B)^T
    c.addGrad(0, tA ? gemm(c, b, dy, tB, true, alpha) : gemm(c, dy, b, false, !tB, alpha));
  if (c.needsGrad(1)) // op(B)' = op(A)^T dY
    c.addGrad(1, tB ? gemm(c, dy, a, true, tA, alpha) : gemm(c, a, dy, !tA, false, alpha));
  if (c.needsGrad(2)) {
    ValueId g = beta == 1.0f ? dy : c.op("Mul", {dy, c.scalar(double(beta), c.dtype(dy))});
    c.addGrad(2, c.sumToShape(g, c.shape(c.input(2))));
  }
}

template <bool IsLog> void softmaxGrad(GradContext &c) {
  Attrs a;
  a.set("axis", Attr::ofInt(c.attrs().getInt("axis", -1)));
  c.addGrad(0, c.op(IsLog ? "megac.LogSoftmaxGrad" : "megac.SoftmaxGrad", {c.gradOutput(0), c.output(0)}, a));
}

Attrs normAttrs(const GradContext &c) {
  Attrs a;
  a.set("axis", Attr::ofInt(c.attrs().getInt("axis", -1)));
  a.set("epsilon", Attr::ofFloat(c.attrs().getFloat("epsilon", 1e-5f)));
  return a;
}

bool onlyFirstOutputHasGrad(GradContext &c, const char *others) {
  for (size_t i = 1; i < c.fwd().outputs.size(); ++i)
    if (c.gradOutput(i) != ir::kNoValue) {
      c.unsupported(llvm::Twine("gradient through the ") + others + " output");
      return false;
    }
  return true;
}

// Y = (X - mean) * invStd * Scale + B over the dims from axis on.
void layerNormGrad(GradContext &c) {
  if (!onlyFirstOutputHasGrad(c, "Mean/InvStdDev")) return;
  ValueId dy = c.gradOutput(0);
  if (c.needsGrad(0) || c.needsGrad(1)) {
    auto g = c.opN("megac.LayerNormalizationGrad", {dy, c.input(0), c.input(1)}, 2, normAttrs(c));
    if (g.size() == 2) {
      c.addGrad(0, g[0]);
      c.addGrad(1, g[1]);
    }
  }
  if (c.needsGrad(2)) c.addGrad(2, c.sumToShape(dy, c.shape(c.input(2))));
}

// Y = X / sqrt(mean(X^2) + epsilon) * Scale over the dims from axis on.
void rmsNormGrad(GradContext &c) {
  auto g = c.opN("megac.RMSNormalizationGrad", {c.gradOutput(0), c.input(0), c.input(1)}, 2, normAttrs(c));
  if (g.size() == 2) {
    c.addGrad(0, g[0]);
    c.addGrad(1, g[1]);
  }
}

// Attention without a KV cache: dQ, dK, dV from the fused megac.AttentionGrad
// (which recomputes the softmax). present_key/present_value are K and V
// themselves then, so their gradients pass straight through.
void attentionGrad(GradContext &c) {
  if (c.input(3) != ir::kNoValue && c.needsGrad(3)) return c.unsupported("gradient of a trainable attn_mask");
  if (c.input(4) != ir::kNoValue || c.input(5) != ir::kNoValue)
    return c.unsupported("gradient of Attention with past_key/past_value");
  if (c.fwd().outputs.size() > 3 && c.gradOutput(3) != ir::kNoValue)
    return c.unsupported("gradient through qk_matmul_output");
  if (ValueId dy = c.gradOutput(0); dy != ir::kNoValue) {
    std::vector<ValueId> ins{dy, c.input(0), c.input(1), c.input(2), c.input(3), c.input(6)};
    while (ins.back() == ir::kNoValue) ins.pop_back();
    auto g = c.opN("megac.AttentionGrad", ins, 3, c.attrs());
    for (size_t i = 0; i < g.size(); ++i)
      if (c.needsGrad(i)) c.addGrad(i, g[i]);
  }
  // present_key/value are [B, kvH, L, D] even when K/V are 3-D [B, L, kvH*D].
  for (size_t k = 1; k <= 2; ++k) {
    ValueId dp = k < c.fwd().outputs.size() ? c.gradOutput(k) : ir::kNoValue;
    if (dp == ir::kNoValue || !c.needsGrad(k)) continue;
    const Shape is = c.shape(c.input(k));
    if (is.size() == 3) {
      Attrs perm;
      perm.set("perm", Attr::ofInts({0, 2, 1, 3}));
      dp = reshape(c, c.op("Transpose", {dp}, perm), is);
    }
    c.addGrad(k, dp);
  }
}

// Y rotates pairs of X by angles theta (cos/sin caches); it is linear in X
// and orthogonal, so dX is dY rotated by -theta: the same op with -sin.
void rotaryGrad(GradContext &c) {
  if (c.needsGrad(1) || c.needsGrad(2)) return c.unsupported("gradient of the cos/sin caches");
  ValueId negSin = c.op("Neg", {c.input(2)});
  std::vector<ValueId> ins{c.gradOutput(0), c.input(1), negSin};
  if (c.input(3) != ir::kNoValue) ins.push_back(c.input(3));
  c.addGrad(0, c.op("RotaryEmbedding", ins, c.attrs()));
}

} // namespace

void registerNNGrads() {
  registerGradRule("MatMul", matMulGrad);
  registerGradRule("Gemm", gemmGrad);
  registerGradRule("Softmax", softmaxGrad<false>);
  registerGradRule("LogSoftmax", softmaxGrad<true>);
  registerGradRule("LayerNormalization", layerNormGrad);
  registerGradRule("RMSNormalization", rmsNormGrad);
  registerGradRule("Attention", attentionGrad);
  registerGradRule("RotaryEmbedding", rotaryGrad);
}

} // namespace megac::autodiff
