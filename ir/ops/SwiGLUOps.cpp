// megac.SwiGLU(G, U) = G * sigmoid(G) * U, the gated SiLU of Llama-style
// MLPs (written by fuse-swiglu), and its gradient megac.SwiGLUGrad(dY, G, U)
// -> (dG, dU). No broadcasting: G, U (and dY) have one type. CPU kernels in
// runtime/cpu/SwiGLUKernels.cpp, CUDA in runtime/cuda/SwiGLUKernels.cu.
#include "ir/OpSchema.h"

namespace megac::ir {

namespace {

llvm::Error requireSameFloat(const InferContext &c, const TensorType &a, const char *an, const TensorType &b,
                             const char *bn) {
  if (!isFloatType(a.dtype)) return c.error(llvm::Twine(an) + " must be a float tensor, got " + a.str());
  if (a != b) return c.error(llvm::Twine(bn) + " " + b.str() + " must have " + an + "'s type " + a.str());
  return llvm::Error::success();
}

llvm::Error requireInputs(const InferContext &c, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!c.hasInput(i)) return c.error("input " + llvm::Twine(i) + " is required");
  return llvm::Error::success();
}

llvm::Error inferSwiGLU(InferContext &c) {
  if (auto e = requireInputs(c, 2)) return e;
  const TensorType &g = *c.inputType(0), &u = *c.inputType(1);
  if (auto e = requireSameFloat(c, g, "G", u, "U")) return e;
  c.setOutput(0, g);
  return llvm::Error::success();
}

llvm::Error inferSwiGLUGrad(InferContext &c) {
  if (auto e = requireInputs(c, 3)) return e;
  const TensorType &dy = *c.inputType(0), &g = *c.inputType(1), &u = *c.inputType(2);
  if (auto e = requireSameFloat(c, g, "G", u, "U")) return e;
  if (auto e = requireSameFloat(c, g, "G", dy, "dY")) return e;
  c.setOutput(0, g);
  c.setOutput(1, g);
  return llvm::Error::success();
}

} // namespace

void registerSwiGLUSchemas() {
  registerOpSchema({"megac.SwiGLU", 2, 2, 1, 1, inferSwiGLU, true});
  registerOpSchema({"megac.SwiGLUGrad", 3, 3, 1, 2, inferSwiGLUGrad, true});
}

} // namespace megac::ir
