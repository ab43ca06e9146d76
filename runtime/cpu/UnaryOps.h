#pragma once
// The unary elementwise ops (ONNX semantics), written once for the CPU kernels
// (ElementwiseUnaryKernels.cpp) and the CUDA kernels (ElementwiseKernels.cu).
// Each op is a struct: its name, the dtypes it is defined for (TypeSets.h), a
// rough CPU cost per element, kArity (for the CUDA launcher), a host
// constructor from the attributes and a MEGAC_HD `operator()`.
#include "runtime/core/Attrs.h"
#include "runtime/cpu/HostDevice.h"
#include "runtime/cpu/ScalarMath.h"
#include "runtime/cpu/TypeSets.h"

#include <cstdint>
#include <type_traits>

namespace megac::cpu::elementwise {

template <class T> MEGAC_HD_INLINE T sigmoid(T x) {
  if (x >= 0) return T(1) / (T(1) + math::exp(-x));
  T e = math::exp(x);
  return e / (T(1) + e);
}

// log(1 + exp(x)) without overflow for large x.
template <class T> MEGAC_HD_INLINE T softplus(T x) {
  return x > 0 ? x + math::log1p(math::exp(-x)) : math::log1p(math::exp(x));
}

#define MEGAC_UNARY_OP(NAME, TYPES, COST, EXPR)                                                               \
  struct NAME##Op {                                                                                           \
    static constexpr const char *name = #NAME;                                                                \
    static constexpr unsigned types = TYPES;                                                                  \
    static constexpr int64_t cost = COST;                                                                     \
    static constexpr int kArity = 1;                                                                          \
    explicit NAME##Op(const Attrs &) {}                                                                       \
    template <class T> MEGAC_HD_INLINE T operator()(T x) const { return EXPR; }                               \
  };

MEGAC_UNARY_OP(Sqrt, kFloat, 4, math::sqrt(x))
MEGAC_UNARY_OP(Reciprocal, kFloat, 2, T(1) / x)
MEGAC_UNARY_OP(Exp, kFloat, 10, math::exp(x))
MEGAC_UNARY_OP(Log, kFloat, 10, math::log(x))
MEGAC_UNARY_OP(Cos, kFloat, 10, math::cos(x))
MEGAC_UNARY_OP(Sin, kFloat, 10, math::sin(x))
MEGAC_UNARY_OP(Tan, kFloat, 10, math::tan(x))
MEGAC_UNARY_OP(Tanh, kFloat, 10, math::tanh(x))
MEGAC_UNARY_OP(Acos, kFloat, 10, math::acos(x))
MEGAC_UNARY_OP(Asin, kFloat, 10, math::asin(x))
MEGAC_UNARY_OP(Atan, kFloat, 10, math::atan(x))
MEGAC_UNARY_OP(Acosh, kFloat, 10, math::acosh(x))
MEGAC_UNARY_OP(Asinh, kFloat, 10, math::asinh(x))
MEGAC_UNARY_OP(Atanh, kFloat, 10, math::atanh(x))
MEGAC_UNARY_OP(Cosh, kFloat, 10, math::cosh(x))
MEGAC_UNARY_OP(Sinh, kFloat, 10, math::sinh(x))
MEGAC_UNARY_OP(Erf, kFloat, 10, math::erf(x))
MEGAC_UNARY_OP(Floor, kFloat, 1, math::floor(x))
MEGAC_UNARY_OP(Ceil, kFloat, 1, math::ceil(x))
MEGAC_UNARY_OP(Round, kFloat, 1, math::roundHalfEven(x))
MEGAC_UNARY_OP(Softsign, kFloat, 2, x / (T(1) + math::fabs(x)))
MEGAC_UNARY_OP(HardSwish, kFloat, 2, x * math::maxOf(T(0), math::minOf(T(1), x / T(6) + T(0.5))))
MEGAC_UNARY_OP(Sigmoid, kFloat, 12, sigmoid(x))
MEGAC_UNARY_OP(Softplus, kFloat, 20, softplus(x))
MEGAC_UNARY_OP(Mish, kFloat, 30, x * math::tanh(softplus(x)))
MEGAC_UNARY_OP(Neg, kSigned, 1, T(-x))
// x < 0 rather than max(x, 0): NaN passes through, as in numpy.
MEGAC_UNARY_OP(Relu, kSigned, 1, x < 0 ? T(0) : x)
MEGAC_UNARY_OP(Not, kBool, 1, T(x == 0))
#undef MEGAC_UNARY_OP

struct AbsOp {
  static constexpr const char *name = "Abs";
  static constexpr unsigned types = kNumeric;
  static constexpr int64_t cost = 1;
  static constexpr int kArity = 1;
  explicit AbsOp(const Attrs &) {}
  template <class T> MEGAC_HD_INLINE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return math::fabs(x);
    else if constexpr (std::is_unsigned_v<T>) return x;
    else return x < 0 ? T(-x) : x;
  }
};

struct SignOp {
  static constexpr const char *name = "Sign";
  static constexpr unsigned types = kNumeric;
  static constexpr int64_t cost = 1;
  static constexpr int kArity = 1;
  explicit SignOp(const Attrs &) {}
  template <class T> MEGAC_HD_INLINE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x > 0 ? T(1) : T(0);
    else return x > 0 ? T(1) : x < 0 ? T(-1) : x; // 0 and NaN map to themselves
  }
};

struct GeluOp {
  static constexpr const char *name = "Gelu";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 20;
  static constexpr int kArity = 1;
  bool tanhApprox;
  explicit GeluOp(const Attrs &a) : tanhApprox(a.getString("approximate", "none") == "tanh") {}
  template <class T> MEGAC_HD_INLINE T operator()(T x) const {
    if (tanhApprox) {
      const T k = T(0.7978845608028654); // sqrt(2 / pi)
      return T(0.5) * x * (T(1) + math::tanh(k * (x + T(0.044715) * x * x * x)));
    }
    return T(0.5) * x * (T(1) + math::erf(x * T(0.7071067811865476)));
  }
};

// The ops with attributes keep them as double; the formula rounds them to T.
struct EluOp {
  static constexpr const char *name = "Elu";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 10;
  static constexpr int kArity = 1;
  double alpha;
  explicit EluOp(const Attrs &a) : alpha(a.getFloat("alpha", 1.0f)) {}
  template <class T> MEGAC_HD_INLINE T operator()(T x) const { return x < 0 ? T(alpha) * math::expm1(x) : x; }
};

struct CeluOp {
  static constexpr const char *name = "Celu";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 10;
  static constexpr int kArity = 1;
  double alpha;
  explicit CeluOp(const Attrs &a) : alpha(a.getFloat("alpha", 1.0f)) {}
  template <class T> MEGAC_HD_INLINE T operator()(T x) const {
    return math::maxOf(T(0), x) + math::minOf(T(0), T(alpha) * math::expm1(x / T(alpha)));
  }
};

struct SeluOp {
  static constexpr const char *name = "Selu";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 10;
  static constexpr int kArity = 1;
  double alpha, gamma;
  explicit SeluOp(const Attrs &a)
      : alpha(a.getFloat("alpha", 1.67326319217681884765625f)), gamma(a.getFloat("gamma", 1.05070102214813232421875f)) {}
  template <class T> MEGAC_HD_INLINE T operator()(T x) const {
    return x <= 0 ? T(gamma) * (T(alpha) * math::exp(x) - T(alpha)) : T(gamma) * x;
  }
};

struct LeakyReluOp {
  static constexpr const char *name = "LeakyRelu";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 1;
  static constexpr int kArity = 1;
  double alpha;
  explicit LeakyReluOp(const Attrs &a) : alpha(a.getFloat("alpha", 0.01f)) {}
  template <class T> MEGAC_HD_INLINE T operator()(T x) const { return x < 0 ? T(alpha) * x : x; }
};

struct ThresholdedReluOp {
  static constexpr const char *name = "ThresholdedRelu";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 1;
  static constexpr int kArity = 1;
  double alpha;
  explicit ThresholdedReluOp(const Attrs &a) : alpha(a.getFloat("alpha", 1.0f)) {}
  template <class T> MEGAC_HD_INLINE T operator()(T x) const { return x > T(alpha) ? x : T(0); }
};

struct HardSigmoidOp {
  static constexpr const char *name = "HardSigmoid";
  static constexpr unsigned types = kFloat;
  static constexpr int64_t cost = 2;
  static constexpr int kArity = 1;
  double alpha, beta;
  explicit HardSigmoidOp(const Attrs &a) : alpha(a.getFloat("alpha", 0.2f)), beta(a.getFloat("beta", 0.5f)) {}
  template <class T> MEGAC_HD_INLINE T operator()(T x) const {
    return math::maxOf(T(0), math::minOf(T(1), T(alpha) * x + T(beta)));
  }
};

struct ShrinkOp {
  static constexpr const char *name = "Shrink";
  static constexpr unsigned types = kNumeric;
  static constexpr int64_t cost = 1;
  static constexpr int kArity = 1;
  double lambd, bias;
  explicit ShrinkOp(const Attrs &a) : lambd(a.getFloat("lambd", 0.5f)), bias(a.getFloat("bias", 0.0f)) {}
  template <class T> MEGAC_HD_INLINE T operator()(T x) const {
    double v = double(x);
    if (v < -lambd) return T(v + bias);
    if (v > lambd) return T(v - bias);
    return T(0);
  }
};

// Float predicates with a bool result.
struct IsNaNOp {
  static constexpr const char *name = "IsNaN";
  static constexpr unsigned types = kFloat;
  static constexpr int kArity = 1;
  explicit IsNaNOp(const Attrs &) {}
  template <class T> MEGAC_HD_INLINE bool operator()(T x) const { return x != x; } // NaN alone is unequal to itself
};

struct IsInfOp {
  static constexpr const char *name = "IsInf";
  static constexpr unsigned types = kFloat;
  static constexpr int kArity = 1;
  bool negative, positive;
  explicit IsInfOp(const Attrs &a)
      : negative(a.getInt("detect_negative", 1) != 0), positive(a.getInt("detect_positive", 1) != 0) {}
  template <class T> MEGAC_HD_INLINE bool operator()(T x) const {
    return math::isinf(x) && (x > 0 ? positive : negative);
  }
};

// Clip's rule for one element: with low > high every element becomes high
// (numpy.clip); NaN passes through.
template <class T> MEGAC_HD_INLINE T clipValue(T v, T low, T high) {
  T r = v < low ? low : v;
  return high < r ? high : r;
}

} // namespace megac::cpu::elementwise
