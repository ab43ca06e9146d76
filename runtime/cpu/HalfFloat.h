#pragma once
// Kernels that have no native f16/bf16 path compute those types in f32:
// widen the inputs, run the f32 kernel, round the result back.
#include "runtime/core/Tensor.h"

namespace megac::cpu {

inline bool isHalfType(DType t) { return t == DType::F16 || t == DType::BF16; }

// An f32 copy of a f16/bf16 tensor (any other tensor is returned as is).
inline Tensor widenToF32(const Tensor &t) {
  if (!isHalfType(t.dtype())) return t;
  Tensor r(DType::F32, t.shape());
  const uint16_t *src = t.data<uint16_t>();
  float *dst = r.data<float>();
  bool bf = t.dtype() == DType::BF16;
  for (int64_t i = 0, n = t.numel(); i < n; ++i) dst[i] = bf ? bf16ToFloat(src[i]) : halfToFloat(src[i]);
  return r;
}

// Rounds the f32 tensor `src` into `dst` (f16/bf16, same element count).
inline void narrowFromF32(const Tensor &src, Tensor &dst) {
  const float *s = src.data<float>();
  uint16_t *d = dst.data<uint16_t>();
  bool bf = dst.dtype() == DType::BF16;
  for (int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] = bf ? floatToBf16(s[i]) : floatToHalf(s[i]);
}

} // namespace megac::cpu
