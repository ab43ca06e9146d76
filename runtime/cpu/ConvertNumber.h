#pragma once
// Number conversion as ONNX Cast does it, for the CPU and the CUDA kernels.
#include "runtime/cpu/HostDevice.h"

#include <cstdint>
#include <type_traits>

namespace megac::cpu::elementwise {

// v converted to D the way ONNX Cast does: float -> integer truncates toward
// zero (NaN gives 0, values beyond int64 saturate, narrower integers wrap as
// the C conversion from int64 does); -> bool is done by the caller.
template <class D, class S> MEGAC_HD_INLINE D convertNumber(S v) {
  if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    if (v != v) return D(0); // NaN
    if constexpr (std::is_unsigned_v<D> && sizeof(D) == 8) {
      if (v >= S(18446744073709551616.0)) return ~D(0);
      if (v >= 0) return D(v);
    }
    int64_t i;
    if (v >= S(9223372036854775807.0)) i = INT64_MAX;
    else if (v <= S(-9223372036854775807.0)) i = INT64_MIN;
    else i = int64_t(v);
    return D(i);
  } else {
    return D(v);
  }
}

} // namespace megac::cpu::elementwise
