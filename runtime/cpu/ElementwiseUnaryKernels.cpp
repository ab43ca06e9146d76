// CPU loops of the unary elementwise ops: y = f(x), same type and shape, plus
// the predicates IsNaN / IsInf (bool results). The ops are in UnaryOps.h.
#include "runtime/cpu/ElementwiseCommon.h"
#include "runtime/cpu/UnaryOps.h"

namespace megac::cpu::elementwise {

namespace {

template <class Op> llvm::Error unaryKernel(KernelContext &ctx) {
  if (hasHalfLike(ctx)) return runViaF32(ctx, unaryKernel<Op>);
  auto x = requireInput(Op::name, ctx, 0);
  if (!x) return x.takeError();
  Tensor &y = ctx.output(0);
  if ((*x)->dtype() != y.dtype() || (*x)->shape() != y.shape())
    return kernelError(Op::name, "the output must have the input's type and shape");
  const Op op(ctx.attrs);
  const Tensor &in = **x;
  bool ok = dispatchType<Op::types>(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    unaryLoop(in.data<T>(), y.data<T>(), y.numel(), [&op](T v) { return op(v); }, Op::cost);
  });
  if (!ok) return unsupportedType(Op::name, in.dtype(), typeSetName(Op::types));
  return llvm::Error::success();
}

template <class Op> llvm::Error predicateKernel(KernelContext &ctx) {
  if (hasHalfLike(ctx)) return runViaF32(ctx, predicateKernel<Op>);
  auto x = requireInput(Op::name, ctx, 0);
  if (!x) return x.takeError();
  Tensor &y = ctx.output(0);
  if (y.dtype() != DType::Bool || (*x)->shape() != y.shape())
    return kernelError(Op::name, "the output must be a bool tensor of the input's shape");
  const Op op(ctx.attrs);
  const Tensor &in = **x;
  bool ok = dispatchType<Op::types>(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    unaryLoop(in.data<T>(), y.data<uint8_t>(), y.numel(), [&op](T v) { return uint8_t(op(v)); }, 2);
  });
  if (!ok) return unsupportedType(Op::name, in.dtype(), typeSetName(Op::types));
  return llvm::Error::success();
}

} // namespace

void registerUnaryKernels() {
  registerKernel("Sqrt", unaryKernel<SqrtOp>);
  registerKernel("Reciprocal", unaryKernel<ReciprocalOp>);
  registerKernel("Exp", unaryKernel<ExpOp>);
  registerKernel("Log", unaryKernel<LogOp>);
  registerKernel("Cos", unaryKernel<CosOp>);
  registerKernel("Sin", unaryKernel<SinOp>);
  registerKernel("Tan", unaryKernel<TanOp>);
  registerKernel("Tanh", unaryKernel<TanhOp>);
  registerKernel("Acos", unaryKernel<AcosOp>);
  registerKernel("Asin", unaryKernel<AsinOp>);
  registerKernel("Atan", unaryKernel<AtanOp>);
  registerKernel("Acosh", unaryKernel<AcoshOp>);
  registerKernel("Asinh", unaryKernel<AsinhOp>);
  registerKernel("Atanh", unaryKernel<AtanhOp>);
  registerKernel("Cosh", unaryKernel<CoshOp>);
  registerKernel("Sinh", unaryKernel<SinhOp>);
  registerKernel("Erf", unaryKernel<ErfOp>);
  registerKernel("Floor", unaryKernel<FloorOp>);
  registerKernel("Ceil", unaryKernel<CeilOp>);
  registerKernel("Round", unaryKernel<RoundOp>);
  registerKernel("Softsign", unaryKernel<SoftsignOp>);
  registerKernel("HardSwish", unaryKernel<HardSwishOp>);
  registerKernel("Sigmoid", unaryKernel<SigmoidOp>);
  registerKernel("Softplus", unaryKernel<SoftplusOp>);
  registerKernel("Mish", unaryKernel<MishOp>);
  registerKernel("Gelu", unaryKernel<GeluOp>);
  registerKernel("Elu", unaryKernel<EluOp>);
  registerKernel("Celu", unaryKernel<CeluOp>);
  registerKernel("Selu", unaryKernel<SeluOp>);
  registerKernel("LeakyRelu", unaryKernel<LeakyReluOp>);
  registerKernel("ThresholdedRelu", unaryKernel<ThresholdedReluOp>);
  registerKernel("HardSigmoid", unaryKernel<HardSigmoidOp>);
  registerKernel("Neg", unaryKernel<NegOp>);
  registerKernel("Relu", unaryKernel<ReluOp>);
  registerKernel("Abs", unaryKernel<AbsOp>);
  registerKernel("Sign", unaryKernel<SignOp>);
  registerKernel("Shrink", unaryKernel<ShrinkOp>);
  registerKernel("Not", unaryKernel<NotOp>);
  registerKernel("IsNaN", predicateKernel<IsNaNOp>);
  registerKernel("IsInf", predicateKernel<IsInfOp>);
}

} // namespace megac::cpu::elementwise
