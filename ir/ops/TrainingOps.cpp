// Ops that megac adds for training: the loss and gradient helpers that have
// no ONNX equivalent.
#include "ir/OpSchema.h"

namespace megac::ir {

// megac.SoftmaxCrossEntropy(logits[..., V], targets[...]) {ignore_index}
//   -> mean over non-ignored positions of -log softmax(logits)[target]; a scalar.
static llvm::Error inferCrossEntropy(InferContext &c) {
  const TensorType &l = *c.inputType(0), &t = *c.inputType(1);
  if (!isFloatType(l.dtype)) return c.error("logits must be floating point");
  if (!isIntegerType(t.dtype)) return c.error("targets must be integers");
  if (l.shape.size() != t.shape.size() + 1 || !std::equal(t.shape.begin(), t.shape.end(), l.shape.begin()))
    return c.error("logits " + l.str() + " and targets " + t.str() + " do not match (logits = targets + [vocab])");
  c.setOutput(0, l.dtype, {});
  return llvm::Error::success();
}

// megac.SoftmaxCrossEntropyGrad(dloss[], logits, targets) {ignore_index} -> dlogits
static llvm::Error inferCrossEntropyGrad(InferContext &c) {
  c.setOutput(0, *c.inputType(1));
  return llvm::Error::success();
}

// megac.SumToShape(x) {shape}: sums x over the dims along which `shape`
// was broadcast to x's shape (the gradient of broadcasting).
static llvm::Error inferSumToShape(InferContext &c) {
  const TensorType &x = *c.inputType(0);
  Shape target = c.attrs().getInts("shape");
  if (target.size() > x.shape.size()) return c.error("target shape has higher rank than the input");
  size_t off = x.shape.size() - target.size();
  for (size_t i = 0; i < target.size(); ++i)
    if (target[i] != 1 && target[i] != x.shape[off + i])
      return c.error("cannot sum " + x.str() + " to " + shapeToString(target));
  c.setOutput(0, x.dtype, target);
  return llvm::Error::success();
}

// megac.GatherGrad(dy, indices) {axis, shape}: the gradient of Gather with
// respect to its data: zeros of `shape` with dy scatter-added at indices.
static llvm::Error inferGatherGrad(InferContext &c) {
  c.setOutput(0, c.inputType(0)->dtype, c.attrs().getInts("shape"));
  return llvm::Error::success();
}

void registerBasicGradSchemas();
void registerNNGradSchemas();
void registerLinearCrossEntropySchemas();

void registerTrainingSchemas() {
  registerBasicGradSchemas();
  registerNNGradSchemas();
  registerLinearCrossEntropySchemas();
  registerOpSchema({"megac.SoftmaxCrossEntropy", 2, 2, 1, 1, inferCrossEntropy, false});
  registerOpSchema({"megac.SoftmaxCrossEntropyGrad", 3, 3, 1, 1, inferCrossEntropyGrad, false});
  registerOpSchema({"megac.SumToShape", 1, 1, 1, 1, inferSumToShape, true});
  registerOpSchema({"megac.GatherGrad", 2, 2, 1, 1, inferGatherGrad, true});
}

} // namespace megac::ir
