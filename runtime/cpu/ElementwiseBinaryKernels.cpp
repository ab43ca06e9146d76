// Binary and variadic elementwise ops with numpy broadcasting: arithmetic,
// Pow, Max/Min/Sum/Mean, comparisons, logic and BitShift (ONNX semantics).
#include "runtime/cpu/ElementwiseCommon.h"
#include "runtime/cpu/IntPow.h"

#include <cmath>
#include <limits>

namespace megac::cpu::elementwise {

namespace {

// -x with wrap-around for the most negative integer (no UB).
template <class T> T wrapNeg(T x) {
  using U = std::make_unsigned_t<T>;
  return T(U(0) - U(x));
}

// Each op: name, accepted types, whether the result is bool, a cost per
// element, a constructor from the attributes and `operator()(T, T)`.
struct AddOp {
  static constexpr const char *name = "Add";
  static constexpr unsigned types = kNumeric;
  static constexpr bool boolResult = false;
  static constexpr int64_t cost = 1;
  explicit AddOp(const Attrs &) {}
  template <class T> T operator()(T a, T b) const { return T(a + b); }
};

struct SubOp {
  static constexpr const char *name = "Sub";
  static constexpr unsigned types = kNumeric;
  static constexpr bool boolResult = false;
  static constexpr int64_t cost = 1;
  explicit SubOp(const Attrs &) {}
  template <class T> T operator()(T a, T b) const { return T(a - b); }
};

struct MulOp {
  static constexpr const char *name = "Mul";
  static constexpr unsigned types = kNumeric;
  static constexpr bool boolResult = false;
  static constexpr int64_t cost = 1;
  explicit MulOp(const Attrs &) {}
  template <class T> T operator()(T a, T b) const { return T(a * b); }
};

// Integer division truncates toward zero (as C); x / 0 gives 0 rather than a trap.
struct DivOp {
  static constexpr const char *name = "Div";
  static constexpr unsigned types = kNumeric;
  static constexpr bool boolResult = false;
  static constexpr int64_t cost = 2;
  explicit DivOp(const Attrs &) {}
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return a / b;
    } else {
      if (b == 0) return T(0);
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1)) return wrapNeg(a);
      return T(a / b);
    }
  }
};

// fmod=0: the result takes the divisor's sign (Python / numpy mod);
// fmod=1: the dividend's (C fmod / %). x mod 0 gives 0 for integers.
struct ModOp {
  static constexpr const char *name = "Mod";
  static constexpr unsigned types = kNumeric;
  static constexpr bool boolResult = false;
  static constexpr int64_t cost = 4;
  bool cStyle;
  explicit ModOp(const Attrs &a) : cStyle(a.getInt("fmod", 0) != 0) {}
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      T r = std::fmod(a, b);
      if (!cStyle && r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    } else {
      if (b == 0) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);
        T r = T(a % b);
        if (!cStyle && r != 0 && ((r < 0) != (b < 0))) r = T(r + b);
        return r;
      } else {
        return T(a % b);
      }
    }
  }
};

// NaN propagates, as numpy's maximum / minimum.
struct MaxOp {
  static constexpr const char *name = "Max";
  static constexpr unsigned types = kNumeric;
  static constexpr bool boolResult = false;
  static constexpr bool isMean = false;
  static constexpr int64_t cost = 1;
  explicit MaxOp(const Attrs &) {}
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      if (b != b) return b;
    return a < b ? b : a;
  }
};

struct MinOp {
  static constexpr const char *name = "Min";
  static constexpr unsigned types = kNumeric;
  static constexpr bool boolResult = false;
  static constexpr bool isMean = false;
  static constexpr int64_t cost = 1;
  explicit MinOp(const Attrs &) {}
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      if (b != b) return b;
    return b < a ? b : a;
  }
};

struct SumOp : AddOp {
  static constexpr const char *name = "Sum";
  static constexpr bool isMean = false;
  using AddOp::AddOp;
};

struct MeanOp : AddOp {
  static constexpr const char *name = "Mean";
  static constexpr unsigned types = kFloat;
  static constexpr bool isMean = true;
  using AddOp::AddOp;
};

#define MEGAC_COMPARE(NAME, TYPES, EXPR)                                                                     \
  struct NAME##Op {                                                                                           \
    static constexpr const char *name = #NAME;                                                                \
    static constexpr unsigned types = TYPES;                                                                  \
    static constexpr bool boolResult = true;                                                                  \
    static constexpr int64_t cost = 1;                                                                        \
    explicit NAME##Op(const Attrs &) {}                                                                       \
    template <class T> bool operator()(T a, T b) const { return EXPR; }                                       \
  };

MEGAC_COMPARE(Equal, kAll, a == b)
MEGAC_COMPARE(Less, kNumeric, a < b)
MEGAC_COMPARE(LessOrEqual, kNumeric, a <= b)
MEGAC_COMPARE(Greater, kNumeric, a > b)
MEGAC_COMPARE(GreaterOrEqual, kNumeric, a >= b)
#undef MEGAC_COMPARE

#define MEGAC_LOGIC(NAME, EXPR)                                                                              \
  struct NAME##Op {                                                                                           \
    static constexpr const char *name = #NAME;                                                                \
    static constexpr unsigned types = kBool;                                                                  \
    static constexpr bool boolResult = false;                                                                 \
    static constexpr int64_t cost = 1;                                                                        \
    explicit NAME##Op(const Attrs &) {}                                                                       \
    template <class T> T operator()(T a, T b) const { return T(EXPR); }                                       \
  };

MEGAC_LOGIC(And, (a != 0) & (b != 0))
MEGAC_LOGIC(Or, (a != 0) | (b != 0))
MEGAC_LOGIC(Xor, (a != 0) ^ (b != 0))
#undef MEGAC_LOGIC

// PRelu: x where x >= 0, slope * x elsewhere; slope broadcasts to x.
struct PReluOp {
  static constexpr const char *name = "PRelu";
  static constexpr unsigned types = kNumeric;
  static constexpr bool boolResult = false;
  static constexpr int64_t cost = 1;
  explicit PReluOp(const Attrs &) {}
  template <class T> T operator()(T x, T slope) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < 0 ? T(slope * x) : x;
  }
};

// Shifts of the type's width or more give 0 (no UB).
struct BitShiftOp {
  static constexpr const char *name = "BitShift";
  static constexpr unsigned types = kUnsignedInt;
  static constexpr bool boolResult = false;
  static constexpr int64_t cost = 1;
  bool left;
  explicit BitShiftOp(const Attrs &a) : left(a.getString("direction", "") == "LEFT") {}
  template <class T> T operator()(T a, T b) const {
    if (b >= T(sizeof(T) * 8)) return T(0);
    return left ? T(a << b) : T(a >> b);
  }
};

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
    const double n = double(ctx.numInputs());
    dispatchType<kFloat>(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T *p = out.data<T>();
      unaryLoop(p, p, out.numel(), [n](T v) { return T(v / T(n)); });
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
          binaryLoop(*plan, x, y, z, [](T u, T v) { return T(std::pow(u, v)); }, 10);
      } else {
        binaryLoop(*plan, x, y, z, intPow<T>, 4);
      }
    });
  } else {
    dispatchType<kNumeric>(base.dtype(), [&](auto baseTag) {
      using T = typename decltype(baseTag)::type;
      ok = dispatchType<kNumeric>(exponent.dtype(), [&](auto expTag) {
        using E = typename decltype(expTag)::type;
        binaryLoop(*plan, base.data<T>(), exponent.data<E>(), out.data<T>(),
                   [](T u, E v) { return convertNumber<T>(std::pow(double(u), double(v))); }, 10);
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
