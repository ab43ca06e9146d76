#pragma once
// Pow on integers, written once for the CPU kernels and the CUDA kernels
// (BinaryOps.h's PowOp, which both compile).
#include "runtime/cpu/HostDevice.h"

#include <type_traits>

namespace megac::cpu {

// Integer power by squaring, wrapping as unsigned arithmetic does; negative
// exponents give 1/base^-e truncated (so 0 unless base is 1 or -1).
template <class T> MEGAC_HD_INLINE T intPow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return T(1);
      if (base == T(-1)) return (exp % 2) ? T(-1) : T(1);
      return T(0);
    }
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, b = U(base);
  for (U e = U(exp); e; e >>= 1) {
    if (e & 1) result = U(result * b);
    b = U(b * b);
  }
  return T(result);
}

} // namespace megac::cpu
