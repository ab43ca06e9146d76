// Elementwise ops: the registry entry point and the helpers shared by
// ElementwiseUnaryKernels.cpp, ElementwiseBinaryKernels.cpp and
// ElementwiseMiscKernels.cpp.
#include "runtime/cpu/ElementwiseCommon.h"

namespace megac::cpu {

namespace elementwise {

bool hasHalfLike(const KernelContext &ctx) {
  for (const Tensor *t : ctx.inputs)
    if (t && isHalfLike(t->dtype())) return true;
  for (const Tensor *t : ctx.outputs)
    if (t && isHalfLike(t->dtype())) return true;
  return false;
}

static Tensor halfToF32(const Tensor &t) {
  Tensor f(DType::F32, t.shape());
  const uint16_t *src = t.data<uint16_t>();
  float *dst = f.data<float>();
  if (t.dtype() == DType::F16) unaryLoop(src, dst, t.numel(), halfToFloat);
  else unaryLoop(src, dst, t.numel(), bf16ToFloat);
  return f;
}

static void f32ToHalf(const Tensor &f, Tensor &t) {
  const float *src = f.data<float>();
  uint16_t *dst = t.data<uint16_t>();
  if (t.dtype() == DType::F16) unaryLoop(src, dst, t.numel(), floatToHalf);
  else unaryLoop(src, dst, t.numel(), floatToBf16);
}

llvm::Error runViaF32(KernelContext &ctx, KernelFn fn) {
  std::vector<Tensor> inTmp(ctx.inputs.size()), outTmp(ctx.outputs.size());
  std::vector<const Tensor *> ins = ctx.inputs;
  std::vector<Tensor *> outs = ctx.outputs;
  for (size_t i = 0; i < ins.size(); ++i)
    if (ins[i] && isHalfLike(ins[i]->dtype())) {
      inTmp[i] = halfToF32(*ins[i]);
      ins[i] = &inTmp[i];
    }
  for (size_t i = 0; i < outs.size(); ++i)
    if (outs[i] && isHalfLike(outs[i]->dtype())) {
      outTmp[i] = Tensor(DType::F32, outs[i]->shape());
      outs[i] = &outTmp[i];
    }
  KernelContext f32ctx{ctx.attrs, ins, outs};
  if (llvm::Error e = fn(f32ctx)) return e;
  for (size_t i = 0; i < outs.size(); ++i)
    if (outTmp[i].defined()) f32ToHalf(outTmp[i], *ctx.outputs[i]);
  return llvm::Error::success();
}

llvm::Error unsupportedType(llvm::StringRef opType, DType t, llvm::StringRef what) {
  return kernelError(opType, llvm::Twine("element type ") + dtypeName(t) + " is not supported; " + opType +
                                 " takes " + what);
}

llvm::Expected<const Tensor *> requireInput(llvm::StringRef opType, const KernelContext &ctx, size_t i) {
  if (const Tensor *t = ctx.input(i)) return t;
  return kernelError(opType, "input " + llvm::Twine(i) + " is missing");
}

Tensor *optionalOutput(const KernelContext &ctx, size_t i) {
  if (i >= ctx.outputs.size() || !ctx.outputs[i] || !ctx.outputs[i]->defined()) return nullptr;
  return ctx.outputs[i];
}

} // namespace elementwise

void registerElementwiseKernels() {
  elementwise::registerUnaryKernels();
  elementwise::registerBinaryKernels();
  elementwise::registerMiscKernels();
}

} // namespace megac::cpu
