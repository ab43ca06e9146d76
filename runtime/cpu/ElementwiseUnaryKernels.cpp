// Unary elementwise ops (ONNX semantics): y = f(x), same type and shape, plus
// the predicates IsNaN / IsInf (bool results).
#include "runtime/cpu/ElementwiseCommon.h"

#include <cmath>

namespace megac::cpu::elementwise {

namespace {

// An op is a struct with name, accepted types, a rough cost per element,
// a constructor from the attributes and `T operator()(T)`.
#define MEGAC_FLOAT_UNARY(NAME, COST, EXPR)                                                                  \
  struct NAME##Op {                                                                                           \
    static constexpr const char *name = #NAME;                                                                \
    static constexpr unsigned types = kFloat;                                                                 \
    static constexpr int64_t cost = COST;                                                                     \
    explicit NAME##Op(const Attrs &) {}                                                                       \
    template <class T> T operator()(T x) const { return EXPR; }                                               \
  };

MEGAC_FLOAT_UNARY(Sqrt, 4, std::sqrt(x))
MEGAC_FLOAT_UNARY(Reciprocal, 2, T(1) / x)
MEGAC_FLOAT_UNARY(Exp, 10, std::exp(x))
MEGAC_FLOAT_UNARY(Log, 10, std::log(x))
MEGAC_FLOAT_UNARY(Cos, 10, std::cos(x))
MEGAC_FLOAT_UNARY(Sin, 10, std::sin(x))
MEGAC_FLOAT_UNARY(Tan, 10, std::tan(x))
MEGAC_FLOAT_UNARY(Tanh, 10, std::tanh(x))
MEGAC_FLOAT_UNARY(Acos, 10, std::acos(x))
MEGAC_FLOAT_UNARY(Asin, 10, std::asin(x))
MEGAC_FLOAT_UNARY(Atan, 10, std::atan(x))
MEGAC_FLOAT_UNARY(Acosh, 10, std::acosh(x))
MEGAC_FLOAT_UNARY(Asinh, 10, std::asinh(x))
MEGAC_FLOAT_UNARY(Atanh, 10, std::atanh(x))
MEGAC_FLOAT_UNARY(Cosh, 10, std::cosh(x))
MEGAC_FLOAT_UNARY(Sinh, 10, std::sinh(x))
MEGAC_FLOAT_UNARY(Erf, 10, std::erf(x))
MEGAC_FLOAT_UNARY(Floor, 1, std::floor(x))
MEGAC_FLOAT_UNARY(Ceil, 1, std::ceil(x))
// nearbyint in the default rounding mode rounds halves to even, as ONNX Round wants.
MEGAC_FLOAT_UNARY(Round, 1, std::nearbyint(x))
MEGAC_FLOAT_UNARY(Softsign, 2, x / (T(1) + std::abs(x)))
MEGAC_FLOAT_UNARY(HardSwish, 2, x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5))))
#undef MEGAC_FLOAT_UNARY

template <class T> T sigmoid(T x) {
  if (x >= 0) return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}

// log(1 + exp(x)) without overflow for large x.
template <class T> T softplus(T x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

struct SigmoidOp {
  static constexpr const char *name = "Sigmoid";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 12;
  explicit SigmoidOp(const Attrs &) {}
  template <class T> T operator()(T x) const { return sigmoid(x); }
};

struct SoftplusOp {
  static constexpr const char *name = "Softplus";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 20;
  explicit SoftplusOp(const Attrs &) {}
  template <class T> T operator()(T x) const { return softplus(x); }
};

struct MishOp {
  static constexpr const char *name = "Mish";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 30;
  explicit MishOp(const Attrs &) {}
  template <class T> T operator()(T x) const { return x * std::tanh(softplus(x)); }
};

struct GeluOp {
  static constexpr const char *name = "Gelu";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 20;
  bool tanhApprox;
  explicit GeluOp(const Attrs &a) : tanhApprox(a.getString("approximate", "none") == "tanh") {}
  template <class T> T operator()(T x) const {
    if (tanhApprox) {
      const T k = T(0.7978845608028654); // sqrt(2 / pi)
      return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
    }
    return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
  }
};

struct EluOp {
  static constexpr const char *name = "Elu";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 10;
  double alpha;
  explicit EluOp(const Attrs &a) : alpha(a.getFloat("alpha", 1.0f)) {}
  template <class T> T operator()(T x) const { return x < 0 ? T(alpha) * std::expm1(x) : x; }
};

struct CeluOp {
  static constexpr const char *name = "Celu";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 10;
  double alpha;
  explicit CeluOp(const Attrs &a) : alpha(a.getFloat("alpha", 1.0f)) {}
  template <class T> T operator()(T x) const {
    return std::max(T(0), x) + std::min(T(0), T(alpha) * std::expm1(x / T(alpha)));
  }
};

struct SeluOp {
  static constexpr const char *name = "Selu";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 10;
  double alpha, gamma;
  explicit SeluOp(const Attrs &a)
      : alpha(a.getFloat("alpha", 1.67326319217681884765625f)), gamma(a.getFloat("gamma", 1.05070102214813232421875f)) {}
  template <class T> T operator()(T x) const {
    return x <= 0 ? T(gamma) * (T(alpha) * std::exp(x) - T(alpha)) : T(gamma) * x;
  }
};

struct LeakyReluOp {
  static constexpr const char *name = "LeakyRelu";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 1;
  double alpha;
  explicit LeakyReluOp(const Attrs &a) : alpha(a.getFloat("alpha", 0.01f)) {}
  template <class T> T operator()(T x) const { return x < 0 ? T(alpha) * x : x; }
};

struct ThresholdedReluOp {
  static constexpr const char *name = "ThresholdedRelu";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 1;
  double alpha;
  explicit ThresholdedReluOp(const Attrs &a) : alpha(a.getFloat("alpha", 1.0f)) {}
  template <class T> T operator()(T x) const { return x > T(alpha) ? x : T(0); }
};

struct HardSigmoidOp {
  static constexpr const char *name = "HardSigmoid";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 2;
  double alpha, beta;
  explicit HardSigmoidOp(const Attrs &a) : alpha(a.getFloat("alpha", 0.2f)), beta(a.getFloat("beta", 0.5f)) {}
  template <class T> T operator()(T x) const { return std::max(T(0), std::min(T(1), T(alpha) * x + T(beta))); }
};

struct NegOp {
  static constexpr const char *name = "Neg";
  static constexpr unsigned types = kSigned;
  static constexpr int64_t cost = 1;
  explicit NegOp(const Attrs &) {}
  template <class T> T operator()(T x) const { return T(-x); }
};

struct ReluOp {
  static constexpr const char *name = "Relu";
  static constexpr unsigned types = kSigned;
  static constexpr int64_t cost = 1;
  explicit ReluOp(const Attrs &) {}
  // x < 0 rather than max(x, 0): NaN passes through, as in numpy.
  template <class T> T operator()(T x) const { return x < 0 ? T(0) : x; }
};

struct AbsOp {
  static constexpr const char *name = "Abs";
  static constexpr unsigned types = kNumeric;
  static constexpr int64_t cost = 1;
  explicit AbsOp(const Attrs &) {}
  template <class T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::abs(x);
    else if constexpr (std::is_unsigned_v<T>) return x;
    else return x < 0 ? T(-x) : x;
  }
};

struct SignOp {
  static constexpr const char *name = "Sign";
  static constexpr unsigned types = kNumeric;
  static constexpr int64_t cost = 1;
  explicit SignOp(const Attrs &) {}
  template <class T> T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x > 0 ? T(1) : T(0);
    else return x > 0 ? T(1) : x < 0 ? T(-1) : x; // 0 and NaN map to themselves
  }
};

struct ShrinkOp {
  static constexpr const char *name = "Shrink";
  static constexpr unsigned types = kNumeric;
  static constexpr int64_t cost = 1;
  double lambd, bias;
  explicit ShrinkOp(const Attrs &a) : lambd(a.getFloat("lambd", 0.5f)), bias(a.getFloat("bias", 0.0f)) {}
  template <class T> T operator()(T x) const {
    double v = double(x);
    if (v < -lambd) return T(v + bias);
    if (v > lambd) return T(v - bias);
    return T(0);
  }
};

struct NotOp {
  static constexpr const char *name = "Not";
  static constexpr unsigned types = kBool;
  static constexpr int64_t cost = 1;
  explicit NotOp(const Attrs &) {}
  template <class T> T operator()(T x) const { return T(x == 0); }
};

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

// Float predicates with a bool result.
struct IsNaNOp {
  static constexpr const char *name = "IsNaN";
  explicit IsNaNOp(const Attrs &) {}
  template <class T> bool operator()(T x) const { return std::isnan(x); }
};

struct IsInfOp {
  static constexpr const char *name = "IsInf";
  bool negative, positive;
  explicit IsInfOp(const Attrs &a)
      : negative(a.getInt("detect_negative", 1) != 0), positive(a.getInt("detect_positive", 1) != 0) {}
  template <class T> bool operator()(T x) const { return std::isinf(x) && (x > 0 ? positive : negative); }
};

template <class Op> llvm::Error predicateKernel(KernelContext &ctx) {
  if (hasHalfLike(ctx)) return runViaF32(ctx, predicateKernel<Op>);
  auto x = requireInput(Op::name, ctx, 0);
  if (!x) return x.takeError();
  Tensor &y = ctx.output(0);
  if (y.dtype() != DType::Bool || (*x)->shape() != y.shape())
    return kernelError(Op::name, "the output must be a bool tensor of the input's shape");
  const Op op(ctx.attrs);
  const Tensor &in = **x;
  bool ok = dispatchType<kFloat>(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    unaryLoop(in.data<T>(), y.data<uint8_t>(), y.numel(), [&op](T v) { return uint8_t(op(v)); }, 2);
  });
  if (!ok) return unsupportedType(Op::name, in.dtype(), typeSetName(kFloat));
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
