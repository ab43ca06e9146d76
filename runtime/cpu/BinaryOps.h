#pragma once
// The binary and variadic elementwise ops (ONNX semantics), written once for
// the CPU kernels (ElementwiseBinaryKernels.cpp) and the CUDA kernels
// (ElementwiseKernels.cu). Each op is a struct: its name, the dtypes it is
// defined for (TypeSets.h), whether its result is bool, a rough CPU cost per
// element, kArity (for the CUDA launcher), a host constructor from the
// attributes and a MEGAC_HD `operator()(T, T)`.
#include "runtime/core/Attrs.h"
#include "runtime/cpu/ConvertNumber.h"
#include "runtime/cpu/HostDevice.h"
#include "runtime/cpu/IntPow.h"
#include "runtime/cpu/ScalarMath.h"
#include "runtime/cpu/TypeSets.h"

#include <cstdint>
#include <type_traits>

namespace megac::cpu::elementwise {

// -x with wrap-around for the most negative integer (no UB).
template <class T> MEGAC_HD_INLINE T wrapNeg(T x) {
  using U = std::make_unsigned_t<T>;
  return T(U(0) - U(x));
}

#define MEGAC_BINARY_OP(NAME, TYPES, BOOL_RESULT, COST, RESULT, EXPR)                                         \
  struct NAME##Op {                                                                                           \
    static constexpr const char *name = #NAME;                                                                \
    static constexpr unsigned types = TYPES;                                                                  \
    static constexpr bool boolResult = BOOL_RESULT;                                                           \
    static constexpr int64_t cost = COST;                                                                     \
    static constexpr int kArity = 2;                                                                          \
    explicit NAME##Op(const Attrs &) {}                                                                       \
    template <class T> MEGAC_HD_INLINE RESULT operator()(T a, T b) const { return EXPR; }                     \
  };

MEGAC_BINARY_OP(Add, kNumeric, false, 1, T, T(a + b))
MEGAC_BINARY_OP(Sub, kNumeric, false, 1, T, T(a - b))
MEGAC_BINARY_OP(Mul, kNumeric, false, 1, T, T(a * b))
MEGAC_BINARY_OP(Equal, kAll, true, 1, bool, a == b)
MEGAC_BINARY_OP(Less, kNumeric, true, 1, bool, a < b)
MEGAC_BINARY_OP(LessOrEqual, kNumeric, true, 1, bool, a <= b)
MEGAC_BINARY_OP(Greater, kNumeric, true, 1, bool, a > b)
MEGAC_BINARY_OP(GreaterOrEqual, kNumeric, true, 1, bool, a >= b)
MEGAC_BINARY_OP(And, kBool, false, 1, T, T((a != 0) & (b != 0)))
MEGAC_BINARY_OP(Or, kBool, false, 1, T, T((a != 0) | (b != 0)))
MEGAC_BINARY_OP(Xor, kBool, false, 1, T, T((a != 0) ^ (b != 0)))
#undef MEGAC_BINARY_OP

// Integer division truncates toward zero (as C); x / 0 gives 0 rather than a trap.
struct DivOp {
  static constexpr const char *name = "Div";
  static constexpr unsigned types = kNumeric;
  static constexpr bool boolResult = false;
  static constexpr int64_t cost = 2;
  static constexpr int kArity = 2;
  explicit DivOp(const Attrs &) {}
  template <class T> MEGAC_HD_INLINE T operator()(T a, T b) const {
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
  static constexpr int kArity = 2;
  bool cStyle;
  explicit ModOp(const Attrs &a) : cStyle(a.getInt("fmod", 0) != 0) {}
  template <class T> MEGAC_HD_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      T r = math::fmod(a, b);
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
  static constexpr int kArity = 2;
  explicit MaxOp(const Attrs &) {}
  template <class T> MEGAC_HD_INLINE T operator()(T a, T b) const {
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
  static constexpr int kArity = 2;
  explicit MinOp(const Attrs &) {}
  template <class T> MEGAC_HD_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      if (b != b) return b;
    return b < a ? b : a;
  }
};

// Sum and Mean fold Add over their inputs; Mean then divides by their count.
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

// Mean's last step: the folded sum divided by the number of inputs.
struct MeanScaleOp {
  static constexpr int kArity = 1;
  double n;
  template <class T> MEGAC_HD_INLINE T operator()(T v) const { return T(v / T(n)); }
};

// PRelu: x where x >= 0, slope * x elsewhere; slope broadcasts to x.
struct PReluOp {
  static constexpr const char *name = "PRelu";
  static constexpr unsigned types = kNumeric;
  static constexpr bool boolResult = false;
  static constexpr int64_t cost = 1;
  static constexpr int kArity = 2;
  explicit PReluOp(const Attrs &) {}
  template <class T> MEGAC_HD_INLINE T operator()(T x, T slope) const {
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
  static constexpr int kArity = 2;
  bool left;
  explicit BitShiftOp(const Attrs &a) : left(a.getString("direction", "") == "LEFT") {}
  template <class T> MEGAC_HD_INLINE T operator()(T a, T b) const {
    if (b >= T(sizeof(T) * 8)) return T(0);
    return left ? T(a << b) : T(a >> b);
  }
};

// Pow with base and exponent of one type: libm's pow on floats, exact
// (wrapping) powers by squaring on integers. A backend may compute x^2 as
// x * x where it knows the exponent is 2.
struct PowOp {
  static constexpr int kArity = 2;
  template <class T> MEGAC_HD_INLINE T operator()(T x, T y) const {
    if constexpr (std::is_floating_point_v<T>) return math::pow(x, y);
    else return intPow(x, y);
  }
};

// Pow with an exponent of another type: computed in double, converted to the
// base's type as Cast does.
struct PowMixedOp {
  static constexpr int kArity = 2;
  template <class T, class E> MEGAC_HD_INLINE T operator()(T x, E y) const {
    return convertNumber<T>(math::pow(double(x), double(y)));
  }
};

} // namespace megac::cpu::elementwise
