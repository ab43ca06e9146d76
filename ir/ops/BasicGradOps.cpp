// Gradient helper ops (megac.*Grad) that have no ONNX form. Their CPU
// kernels are in runtime/cpu/BasicGradKernels.cpp; the rules that emit them
// in passes/autodiff/{Elementwise,Shape}Grads.cpp.
#include "ir/OpSchema.h"
#include "runtime/cpu/ShapeSemantics.h"

namespace megac::ir {

namespace {

// megac.GeluGrad(dY, X) {approximate = "none" | "tanh"} -> dX = dY * Gelu'(X)
llvm::Error inferGeluGrad(InferContext &c) {
  const TensorType &dy = *c.inputType(0), &x = *c.inputType(1);
  if (!isFloatType(x.dtype)) return c.error("X must be floating point, got " + x.str());
  if (dy != x) return c.error("dY " + dy.str() + " and X " + x.str() + " differ");
  std::string approx = c.attrs().getString("approximate", "none");
  if (approx != "none" && approx != "tanh") return c.error("approximate must be \"none\" or \"tanh\", got \"" + approx + "\"");
  c.setOutput(0, x);
  return llvm::Error::success();
}

// An optional int input's constant value ({} when omitted); nullopt when it
// is present but not a known constant.
std::optional<std::vector<int64_t>> constInts(InferContext &c, size_t i) {
  if (!c.hasInput(i)) return std::vector<int64_t>{};
  const Tensor *t = c.inputConst(i);
  if (!t) return std::nullopt;
  return t->toInt64Vector();
}

// megac.SliceGrad(dY, starts, ends, axes?, steps?) {shape} -> dX: zeros of
// `shape` with dY written at the positions Slice(starts, ends, axes, steps)
// reads (the gradient of Slice with respect to its data).
llvm::Error inferSliceGrad(InferContext &c) {
  const TensorType &dy = *c.inputType(0);
  if (!c.attrs().has("shape")) return c.error("the shape attribute is missing");
  Shape shape = c.attrs().getInts("shape");
  for (int64_t d : shape)
    if (d < 0) return c.error("negative dimension in shape " + shapeToString(shape));
  for (size_t i = 1; i < c.numInputs(); ++i)
    if (c.hasInput(i) && !isIntegerType(c.inputType(i)->dtype))
      return c.error("input " + llvm::Twine(i) + " must be integer, got " + c.inputType(i)->str());
  auto starts = constInts(c, 1), ends = constInts(c, 2), axes = constInts(c, 3), steps = constInts(c, 4);
  if (starts && ends && axes && steps) {
    auto dims = cpu::resolveSlice(shape, *starts, *ends, *axes, *steps);
    if (!dims) return c.error(llvm::toString(dims.takeError()));
    Shape sliced;
    for (const cpu::SliceDim &d : *dims) sliced.push_back(d.count);
    if (sliced != dy.shape)
      return c.error("dY " + dy.str() + " is not the shape of the slice, " + shapeToString(sliced));
  } else if (dy.shape.size() != shape.size()) {
    return c.error("dY " + dy.str() + " and shape " + shapeToString(shape) + " differ in rank");
  }
  c.setOutput(0, dy.dtype, shape);
  return llvm::Error::success();
}

} // namespace

void registerBasicGradSchemas() {
  registerOpSchema({"megac.GeluGrad", 2, 2, 1, 1, inferGeluGrad, true});
  registerOpSchema({"megac.SliceGrad", 3, 5, 1, 1, inferSliceGrad, true});
}

} // namespace megac::ir
