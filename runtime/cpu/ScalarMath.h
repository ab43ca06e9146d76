#pragma once
// One name per libm function for the formulas both backends compile: std::
// on the host; on the device CUDA's math, the f32 function (expf, erff, ...)
// for a float, as the CUDA kernels called before the formulas were shared.
#include "runtime/cpu/HostDevice.h"

#include <cmath>
#include <limits>

namespace megac::cpu::math {

#ifdef __CUDA_ARCH__
#define MEGAC_MATH1(NAME, HOST, F32)                                                                          \
  MEGAC_HD_INLINE float NAME(float x) { return ::F32(x); }                                                    \
  MEGAC_HD_INLINE double NAME(double x) { return ::HOST(x); }
#define MEGAC_MATH2(NAME, HOST, F32)                                                                          \
  MEGAC_HD_INLINE float NAME(float x, float y) { return ::F32(x, y); }                                        \
  MEGAC_HD_INLINE double NAME(double x, double y) { return ::HOST(x, y); }
#else
#define MEGAC_MATH1(NAME, HOST, F32)                                                                          \
  MEGAC_HD_INLINE float NAME(float x) { return std::HOST(x); }                                                \
  MEGAC_HD_INLINE double NAME(double x) { return std::HOST(x); }
#define MEGAC_MATH2(NAME, HOST, F32)                                                                          \
  MEGAC_HD_INLINE float NAME(float x, float y) { return std::HOST(x, y); }                                    \
  MEGAC_HD_INLINE double NAME(double x, double y) { return std::HOST(x, y); }
#endif

MEGAC_MATH1(sqrt, sqrt, sqrtf)
MEGAC_MATH1(exp, exp, expf)
MEGAC_MATH1(expm1, expm1, expm1f)
MEGAC_MATH1(log, log, logf)
MEGAC_MATH1(log1p, log1p, log1pf)
MEGAC_MATH1(cos, cos, cosf)
MEGAC_MATH1(sin, sin, sinf)
MEGAC_MATH1(tan, tan, tanf)
MEGAC_MATH1(tanh, tanh, tanhf)
MEGAC_MATH1(acos, acos, acosf)
MEGAC_MATH1(asin, asin, asinf)
MEGAC_MATH1(atan, atan, atanf)
MEGAC_MATH1(acosh, acosh, acoshf)
MEGAC_MATH1(asinh, asinh, asinhf)
MEGAC_MATH1(atanh, atanh, atanhf)
MEGAC_MATH1(cosh, cosh, coshf)
MEGAC_MATH1(sinh, sinh, sinhf)
MEGAC_MATH1(erf, erf, erff)
MEGAC_MATH1(floor, floor, floorf)
MEGAC_MATH1(ceil, ceil, ceilf)
MEGAC_MATH1(fabs, fabs, fabsf)
// Rounds halves to even (ONNX Round) in the default rounding mode: the host
// uses nearbyint, which unlike rint never raises the inexact flag.
#ifdef __CUDA_ARCH__
MEGAC_MATH1(roundHalfEven, rint, rintf)
#else
MEGAC_MATH1(roundHalfEven, nearbyint, nearbyintf)
#endif
MEGAC_MATH2(pow, pow, powf)
MEGAC_MATH2(fmod, fmod, fmodf)
#undef MEGAC_MATH1
#undef MEGAC_MATH2

template <class T> MEGAC_HD_INLINE bool isnan(T x) {
#ifdef __CUDA_ARCH__
  return ::isnan(x);
#else
  return std::isnan(x);
#endif
}

// On the device, the comparison the CUDA kernels used before this header.
template <class T> MEGAC_HD_INLINE bool isinf(T x) {
#ifdef __CUDA_ARCH__
  return fabs(x) > std::numeric_limits<T>::max();
#else
  return std::isinf(x);
#endif
}

// std::max / std::min's rule (the first argument on ties and when either is
// NaN), callable on the device.
template <class T> MEGAC_HD_INLINE T maxOf(T a, T b) { return a < b ? b : a; }
template <class T> MEGAC_HD_INLINE T minOf(T a, T b) { return b < a ? b : a; }

} // namespace megac::cpu::math
