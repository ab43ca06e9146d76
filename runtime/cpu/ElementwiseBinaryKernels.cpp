// CPU loops of the binary and variadic elementwise ops with numpy
// broadcasting: arithmetic, Pow, Max/Min/Sum/Mean, comparisons, logic, PRelu
// and BitShift. The ops are in BinaryOps.h.
#include "runtime/cpu/BinaryOps.h"
#include "runtime/cpu/ElementwiseCommon.h"

namespace megac::cpu::elementwise {

namespace {

// out = op(a, b) with broadcasting; a and b have the same dtype.
template <class Op> llvm::Error applyBinary(const Op &op, const Tensor &a, const Tensor &b, Tensor &out) {
  auto plan = makeBroadcastPlan(Op::name, out.shape(), {&a, &b});
  if (!plan) return plan.takeError();
  bool ok = dispatchType<Op::types>(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = std::conditional_t<Op::boolResult, uint8_t, T>;
    binaryLoop(*plan, a.data<T>(), b.data<T>(), out.data<R>(), [&op](T x, T y) { return R(op(x, y)); }, Op::cost);
  });
  if (!ok) return unsupportedType(Op::name, a.dtype(), typeSetName(Op::types));
  return llvm::Error::success();
}

llvm::Error checkSameDType(llvm::StringRef opType, const Tensor &a, const Tensor &b) {
  if (a.dtype() == b.dtype()) return llvm::Error::success();
  return kernelError(opType, llvm::Twine("inputs have different element types (") + dtypeName(a.dtype()) + " and " +
                                 dtypeName(b.dtype()) + ")");
}

template <class Op> llvm::Error binaryKernel(KernelContext &ctx) {
  if (hasHalfLike(ctx)) return runViaF32(ctx, binaryKernel<Op>);
  auto a = requireInput(Op::name, ctx, 0);
  if (!a) return a.takeError();
  auto b = requireInput(Op::name, ctx, 1);
  if (!b) return b.takeError();
  if (auto e = checkSameDType(Op::name, **a, **b)) return e;
  Tensor &out = ctx.output(0);
  DType want = Op::boolResult ? DType::Bool : (*a)->dtype();
  if (out.dtype() != want)
    return kernelError(Op::name, llvm::Twine("the output must be ") + dtypeName(want) + ", not " +
                                     dtypeName(out.dtype()));
  return applyBinary(Op(ctx.attrs), **a, **b, out);
}

// Max, Min, Sum, Mean over 1 or more inputs, folded left to right into the
// output (each step broadcasts the next input to the output's shape).
template <class Op> llvm::Error variadicKernel(KernelContext &ctx) {
  if (hasHalfLike(ctx)) return runViaF32(ctx, variadicKernel<Op>);
  if (ctx.numInputs() == 0) return kernelError(Op::name, "needs at least one input");
  Tensor &out = ctx.output(0);
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    auto in = requireInput(Op::name, ctx, i);
    if (!in) return in.takeError();
    if (auto e = checkSameDType(Op::name, **in, out)) return e;
  }
  if (!dispatchType<Op::types>(out.dtype(), [](auto) {}))
    return unsupportedType(Op::name, out.dtype(), typeSetName(Op::types));
  const Op op(ctx.attrs);
  if (ctx.numInputs() == 1) {
    if (auto e = broadcastCopy(Op::name, *ctx.input(0), out)) return e;
  } else {
    if (auto e = applyBinary(op, *ctx.input(0), *ctx.input(1), out)) return e;
    for (size_t i = 2; i < ctx.numInputs(); ++i)
      if (auto e = applyBinary(op, out, *ctx.input(i), out)) return e;
  }
  if constexpr (Op::isMean) {
    const MeanScaleOp scale{double(ctx.numInputs())};
    dispatchType<kFloat>(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T *p = out.data<T>();
      unaryLoop(p, p, out.numel(), [scale](T v) { return scale(v); });
    });
  }
  return llvm::Error::success();
}


// Pow: base and exponent may have different types; the result has the base's.
llvm::Error powKernel(KernelContext &ctx) {
  if (hasHalfLike(ctx)) return runViaF32(ctx, powKernel);
  auto a = requireInput("Pow", ctx, 0);
  if (!a) return a.takeError();
  auto b = requireInput("Pow", ctx, 1);
  if (!b) return b.takeError();
  const Tensor &base = **a, &exponent = **b;
  Tensor &out = ctx.output(0);
  if (out.dtype() != base.dtype()) return kernelError("Pow", "the output must have the base's element type");
  auto plan = makeBroadcastPlan("Pow", out.shape(), {&base, &exponent});
  if (!plan) return plan.takeError();
  bool ok = false;
  if (base.dtype() == exponent.dtype()) {
    ok = dispatchType<kNumeric>(base.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T *x = base.data<T>(), *y = exponent.data<T>();
      T *z = out.data<T>();
      if constexpr (std::is_floating_point_v<T>) {
        if (exponent.numel() == 1 && *y == T(2)) // x^2, common in norms and variances
          binaryLoop(*plan, x, y, z, [](T u, T) { return u * u; });
        else
          binaryLoop(*plan, x, y, z, [](T u, T v) { return PowOp{}(u, v); }, 10);
      } else {
        binaryLoop(*plan, x, y, z, [](T u, T v) { return PowOp{}(u, v); }, 4);
      }
    });
  } else {
    dispatchType<kNumeric>(base.dtype(), [&](auto baseTag) {
      using T = typename decltype(baseTag)::type;
      ok = dispatchType<kNumeric>(exponent.dtype(), [&](auto expTag) {
        using E = typename decltype(expTag)::type;
        binaryLoop(*plan, base.data<T>(), exponent.data<E>(), out.data<T>(),
                   [](T u, E v) { return PowMixedOp{}(u, v); }, 10);
      });
    });
  }
  if (!ok) {
    DType bad = dispatchType<kNumeric>(base.dtype(), [](auto) {}) ? exponent.dtype() : base.dtype();
    return unsupportedType("Pow", bad, typeSetName(kNumeric));
  }
  return llvm::Error::success();
}

} // namespace

void registerBinaryKernels() {
  registerKernel("Add", binaryKernel<AddOp>);
  registerKernel("Sub", binaryKernel<SubOp>);
  registerKernel("Mul", binaryKernel<MulOp>);
  registerKernel("Div", binaryKernel<DivOp>);
  registerKernel("Mod", binaryKernel<ModOp>);
  registerKernel("Pow", powKernel);
  registerKernel("Max", variadicKernel<MaxOp>);
  registerKernel("Min", variadicKernel<MinOp>);
  registerKernel("Sum", variadicKernel<SumOp>);
  registerKernel("Mean", variadicKernel<MeanOp>);
  registerKernel("Equal", binaryKernel<EqualOp>);
  registerKernel("Less", binaryKernel<LessOp>);
  registerKernel("LessOrEqual", binaryKernel<LessOrEqualOp>);
  registerKernel("Greater", binaryKernel<GreaterOp>);
  registerKernel("GreaterOrEqual", binaryKernel<GreaterOrEqualOp>);
  registerKernel("And", binaryKernel<AndOp>);
  registerKernel("Or", binaryKernel<OrOp>);
  registerKernel("Xor", binaryKernel<XorOp>);
  registerKernel("BitShift", binaryKernel<BitShiftOp>);
  registerKernel("PRelu", binaryKernel<PReluOp>);
}

} // namespace megac::cpu::elementwise
