#pragma once
// What the Reduce* ops do with each element, written once for the CPU kernels
// (ReductionKernels.cpp) and the CUDA kernels (ReductionKernels.cu). Each
// backend chooses the accumulator Acc (floats: double on the CPU, float on
// the GPU; integers: int64 on both) and its traversal; these are the rules.
#include "runtime/cpu/HostDevice.h"
#include "runtime/cpu/ScalarMath.h"

#include <cstdint>
#include <limits>
#include <type_traits>

namespace megac::cpu::reduce {

enum class ReduceKind { Sum, Mean, Max, Min, Prod, SumSquare, L1, L2, LogSum, LogSumExp };

// The ONNX op of each kind.
template <ReduceKind K> constexpr const char *reduceName() {
  switch (K) {
  case ReduceKind::Sum: return "ReduceSum";
  case ReduceKind::Mean: return "ReduceMean";
  case ReduceKind::Max: return "ReduceMax";
  case ReduceKind::Min: return "ReduceMin";
  case ReduceKind::Prod: return "ReduceProd";
  case ReduceKind::SumSquare: return "ReduceSumSquare";
  case ReduceKind::L1: return "ReduceL1";
  case ReduceKind::L2: return "ReduceL2";
  case ReduceKind::LogSum: return "ReduceLogSum";
  case ReduceKind::LogSumExp: return "ReduceLogSumExp";
  }
  return "Reduce";
}

// Integers wrap around (as numpy) instead of overflowing.
template <class Acc> MEGAC_HD_INLINE Acc wrapAdd(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>) return Acc(uint64_t(a) + uint64_t(b));
  else return a + b;
}
template <class Acc> MEGAC_HD_INLINE Acc wrapMul(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>) return Acc(uint64_t(a) * uint64_t(b));
  else return a * b;
}

template <class Acc> MEGAC_HD_INLINE bool isNaN(Acc a) {
  if constexpr (std::is_floating_point_v<Acc>) return math::isnan(a);
  else return false;
}

// Max / Min start from -inf / +inf for floats, the type's limits for integers.
template <class T, class Acc> MEGAC_HD_INLINE Acc maxIdentity() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<Acc>::infinity();
  else return Acc(std::numeric_limits<T>::lowest());
}
template <class T, class Acc> MEGAC_HD_INLINE Acc minIdentity() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<Acc>::infinity();
  else return Acc(std::numeric_limits<T>::max());
}

// NaN wins, as in numpy.
template <class Acc> MEGAC_HD_INLINE Acc maxCombine(Acc a, Acc b) {
  return (b > a || isNaN(b)) && !isNaN(a) ? b : a;
}
template <class Acc> MEGAC_HD_INLINE Acc minCombine(Acc a, Acc b) {
  return (b < a || isNaN(b)) && !isNaN(a) ? b : a;
}

// ReduceSumSquare's and ReduceL2's term.
template <class Acc, class T> MEGAC_HD_INLINE Acc square(T v) { return wrapMul(Acc(v), Acc(v)); }

// ReduceL1's term.
template <class Acc, class T> MEGAC_HD_INLINE Acc magnitude(T v) {
  if constexpr (std::is_signed_v<T> || std::is_floating_point_v<T>) return Acc(v < 0 ? -Acc(v) : Acc(v));
  else return Acc(v);
}

// ReduceMean's result: integers divide (0 for an empty reduction); floats
// give 0 / 0 = NaN for an empty one.
template <class Acc> MEGAC_HD_INLINE Acc meanOf(Acc sum, int64_t count) {
  if constexpr (std::is_integral_v<Acc>) return count ? sum / count : Acc(0);
  else return sum / Acc(count);
}

} // namespace megac::cpu::reduce
