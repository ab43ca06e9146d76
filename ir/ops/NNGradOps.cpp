// Gradient helper ops (megac.*Grad) of the NN layers: fused backward passes
// where composing ONNX ops would be slow (norms, softmax, attention). Their
// CPU kernels are in runtime/cpu/NNGradKernels.cpp; the rules that emit them
// in passes/autodiff/NNGrads.cpp.
#include "ir/OpSchema.h"
#include "runtime/cpu/NormAttentionShapes.h"

namespace megac::ir {

namespace {

llvm::Error requireSameType(InferContext &c, size_t a, size_t b, const char *what) {
  const TensorType &ta = *c.inputType(a), &tb = *c.inputType(b);
  if (ta.dtype != tb.dtype || ta.shape != tb.shape)
    return c.error(llvm::Twine(what) + ": " + ta.str() + " and " + tb.str() + " differ");
  return llvm::Error::success();
}

// megac.SoftmaxGrad(dY, Y) {axis} -> dX = Y * (dY - sum(dY * Y, axis))
// megac.LogSoftmaxGrad(dY, Y) {axis} -> dX = dY - exp(Y) * sum(dY, axis)
// Y is the forward op's output.
llvm::Error inferSoftmaxGrad(InferContext &c) {
  const TensorType &y = *c.inputType(1);
  if (!isFloatType(y.dtype)) return c.error("Y must be floating point, got " + y.str());
  if (auto e = requireSameType(c, 0, 1, "dY and Y")) return e;
  if (auto axis = normalizeAxis(c, c.attrs().getInt("axis", -1), int64_t(y.shape.size())); !axis)
    return axis.takeError();
  c.setOutput(0, y);
  return llvm::Error::success();
}

// megac.LayerNormalizationGrad(dY, X, Scale) {axis, epsilon} -> (dX, dScale)
// megac.RMSNormalizationGrad(dY, X, Scale) {axis, epsilon} -> (dX, dScale)
// The statistics are recomputed from X. dScale has Scale's shape (summed over
// the dims along which Scale is broadcast). dB is a plain SumToShape of dY.
llvm::Error inferNormGrad(InferContext &c) {
  const TensorType &x = *c.inputType(1), &scale = *c.inputType(2);
  if (!isFloatType(x.dtype)) return c.error("X must be floating point, got " + x.str());
  if (auto e = requireSameType(c, 0, 1, "dY and X")) return e;
  if (scale.dtype != x.dtype) return c.error("Scale " + scale.str() + " and X " + x.str() + " differ in dtype");
  auto d = cpu::normDims(x.shape, c.attrs().getInt("axis", -1));
  if (!d) return c.error(llvm::toString(d.takeError()));
  if (auto e = cpu::checkNormParam(scale.shape, x.shape, "Scale")) return c.error(llvm::toString(std::move(e)));
  c.setOutput(0, x);
  c.setOutput(1, scale);
  return llvm::Error::success();
}

// megac.AttentionGrad(dY, Q, K, V, attn_mask?, nonpad_kv_seqlen?) {Attention's attributes}
//   -> (dQ, dK, dV)
// The backward of Attention without a KV cache: recomputes the softmax from
// Q and K (flash-attention style), so nothing but the inputs is kept.
llvm::Error inferAttentionGrad(InferContext &c) {
  const TensorType &q = *c.inputType(1), &k = *c.inputType(2), &v = *c.inputType(3);
  if (!isFloatType(q.dtype) || k.dtype != q.dtype || v.dtype != q.dtype)
    return c.error("Q, K and V must share a floating-point dtype, got " + q.str() + ", " + k.str() + ", " + v.str());
  cpu::AttentionInputShapes in;
  in.q = &q.shape;
  in.k = &k.shape;
  in.v = &v.shape;
  if (const TensorType *m = c.inputType(4)) {
    if (m->dtype != DType::Bool && m->dtype != q.dtype)
      return c.error("attn_mask must be bool or Q's dtype, got " + m->str());
    in.mask = &m->shape;
  }
  if (const TensorType *n = c.inputType(5)) {
    if (!isIntegerType(n->dtype)) return c.error("nonpad_kv_seqlen must be integer, got " + n->str());
    in.nonpadKvSeqlen = &n->shape;
  }
  auto d = cpu::attentionDims(c.attrs(), in);
  if (!d) return c.error(llvm::toString(d.takeError()));
  const TensorType &dy = *c.inputType(0);
  if (dy.dtype != q.dtype || dy.shape != d->yShape)
    return c.error("dY " + dy.str() + " does not match the attention output " + shapeToString(d->yShape));
  c.setOutput(0, q);
  c.setOutput(1, k);
  c.setOutput(2, v);
  return llvm::Error::success();
}

} // namespace

void registerNNGradSchemas() {
  registerOpSchema({"megac.SoftmaxGrad", 2, 2, 1, 1, inferSoftmaxGrad});
  registerOpSchema({"megac.LogSoftmaxGrad", 2, 2, 1, 1, inferSoftmaxGrad});
  registerOpSchema({"megac.LayerNormalizationGrad", 3, 3, 2, 2, inferNormGrad});
  registerOpSchema({"megac.RMSNormalizationGrad", 3, 3, 2, 2, inferNormGrad});
  registerOpSchema({"megac.AttentionGrad", 4, 6, 3, 3, inferAttentionGrad});
}

} // namespace megac::ir
