#pragma once
// megac.SwiGLU's formulas, written once for the CPU kernels (SwiGLUKernels.cpp)
// and the CUDA kernels (SwiGLUKernels.cu); each backend computes in T (f16/bf16
// through f32).
#include "runtime/cpu/HostDevice.h"
#include "runtime/cpu/ScalarMath.h"

namespace megac::cpu {

// 1 / (1 + exp(-g)) saturates to 0 or 1 without NaN, so loops over it need
// no branch (UnaryOps.h's Sigmoid branches on the sign instead).
template <class T> MEGAC_HD_INLINE T swigluSigmoid(T g) { return T(1) / (T(1) + math::exp(-g)); }

// Y = G * sigmoid(G) * U.
template <class T> MEGAC_HD_INLINE T swigluValue(T g, T u) { return g * swigluSigmoid(g) * u; }

// With s = sigmoid(g): dG = dY u s (1 + g (1 - s)) and dU = dY g s.
template <class T> MEGAC_HD_INLINE T swigluGradG(T dy, T g, T u, T s) { return dy * u * s * (T(1) + g * (T(1) - s)); }
template <class T> MEGAC_HD_INLINE T swigluGradU(T dy, T g, T s) { return dy * g * s; }

} // namespace megac::cpu
