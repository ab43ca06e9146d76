// megac.LinearCrossEntropy and its gradient: the LM head's product fused
// with the loss, so the [tokens, vocab] logits never exist whole (the
// kernels compute them a chunk of rows at a time). fuse-linear-cross-entropy
// introduces them.
#include "ir/OpSchema.h"

namespace megac::ir {

namespace {

// Checks h[..., H], W [H, V] (or [V, H] with trans_w) and targets[...];
// returns V.
llvm::Expected<int64_t> checkOperands(InferContext &c, size_t first) {
  for (size_t i = first; i < first + 3; ++i)
    if (!c.hasInput(i)) return c.error("input " + llvm::Twine(i) + " is missing");
  const TensorType &h = *c.inputType(first), &w = *c.inputType(first + 1), &t = *c.inputType(first + 2);
  if (!isFloatType(h.dtype) || w.dtype != h.dtype)
    return c.error("h and W must share a floating-point dtype, got " + h.str() + " and " + w.str());
  if (!isIntegerType(t.dtype)) return c.error("targets must be integers, got " + t.str());
  if (h.shape.empty() || w.shape.size() != 2)
    return c.error("expected h [..., H] and a 2-D W, got " + h.str() + " and " + w.str());
  bool trans = c.attrs().getInt("trans_w", 0) != 0;
  int64_t hw = trans ? w.shape[1] : w.shape[0], v = trans ? w.shape[0] : w.shape[1];
  if (hw != h.shape.back())
    return c.error("h " + h.str() + " and W " + w.str() + (trans ? " (trans_w)" : "") + " differ in the hidden size");
  if (h.shape.size() != t.shape.size() + 1 || !std::equal(t.shape.begin(), t.shape.end(), h.shape.begin()))
    return c.error("h " + h.str() + " and targets " + t.str() + " do not match (h = targets + [hidden])");
  return v;
}

// megac.LinearCrossEntropy(h[..., H], W, targets[...]) {ignore_index, trans_w}
//   = megac.SoftmaxCrossEntropy(h @ W (W^T with trans_w), targets): a scalar.
llvm::Error inferLinearCrossEntropy(InferContext &c) {
  auto v = checkOperands(c, 0);
  if (!v) return v.takeError();
  c.setOutput(0, c.inputType(0)->dtype, {});
  return llvm::Error::success();
}

// megac.LinearCrossEntropyGrad(dloss[], h, W, targets) {ignore_index, trans_w}
//   -> (dh, dW), dW in W's own layout.
llvm::Error inferLinearCrossEntropyGrad(InferContext &c) {
  auto v = checkOperands(c, 1);
  if (!v) return v.takeError();
  const TensorType *d = c.inputType(0);
  if (!d || !d->shape.empty() || d->dtype != c.inputType(1)->dtype)
    return c.error("dloss must be a scalar of h's dtype");
  c.setOutput(0, *c.inputType(1));
  c.setOutput(1, *c.inputType(2));
  return llvm::Error::success();
}

} // namespace

void registerLinearCrossEntropySchemas() {
  registerOpSchema({"megac.LinearCrossEntropy", 3, 3, 1, 1, inferLinearCrossEntropy, false});
  registerOpSchema({"megac.LinearCrossEntropyGrad", 4, 4, 2, 2, inferLinearCrossEntropyGrad, false});
}

} // namespace megac::ir
