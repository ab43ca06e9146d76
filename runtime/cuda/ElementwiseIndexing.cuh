#pragma once
// Index arithmetic shared by the elementwise and shape CUDA kernels: division
// by launch-time constants, the offsets of N strided operands at a linear
// output index (32-bit where every offset fits, 64-bit otherwise) and
// aligned vector types for 4-wide loads and stores.
#include <cuda_runtime.h>

#include <cstdint>

namespace megac::cuda {

// n / d and n % d for a divisor fixed at launch, by a multiply-high and a
// shift (Granlund & Montgomery, as PyTorch's IntDivider). Valid for
// n, d < 2^31.
struct FastDivmod {
  uint32_t divisor = 1, multiplier = 1, shift = 0;

  FastDivmod() = default;
  __host__ explicit FastDivmod(uint32_t d) : divisor(d) {
    shift = 0;
    while (shift < 32 && (uint64_t(1) << shift) < d) ++shift;
    const uint64_t one = 1;
    multiplier = uint32_t(((one << 32) * ((one << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, multiplier) + n) >> shift; }
};

// A strided iteration space for NArgs operands, innermost dim first (host side).
template <int NArgs, int MaxDims> struct StridedSpace {
  int rank = 0;
  int64_t sizes[MaxDims] = {};
  int64_t strides[MaxDims][NArgs] = {};
};

// The element offset of each operand at linear index i of the space:
// 32-bit index math (Wide = false) or 64-bit (Wide = true).
template <int NArgs, int MaxDims, bool Wide> struct OffsetCalc;

template <int NArgs, int MaxDims> struct OffsetCalc<NArgs, MaxDims, false> {
  using Index = uint32_t;
  using Offset = int32_t;
  int rank = 0;
  FastDivmod sizes[MaxDims];
  int32_t strides[MaxDims][NArgs] = {};

  __host__ explicit OffsetCalc(const StridedSpace<NArgs, MaxDims> &s) : rank(s.rank) {
    for (int d = 0; d < s.rank; ++d) {
      sizes[d] = FastDivmod(uint32_t(s.sizes[d]));
      for (int k = 0; k < NArgs; ++k) strides[d][k] = int32_t(s.strides[d][k]);
    }
  }
  __device__ __forceinline__ void get(uint32_t linear, int32_t (&off)[NArgs]) const {
#pragma unroll
    for (int k = 0; k < NArgs; ++k) off[k] = 0;
#pragma unroll
    for (int d = 0; d < MaxDims; ++d) {
      if (d == rank) break;
      uint32_t q = sizes[d].div(linear);
      int32_t r = int32_t(linear - q * sizes[d].divisor);
      linear = q;
#pragma unroll
      for (int k = 0; k < NArgs; ++k) off[k] += r * strides[d][k];
    }
  }
  __device__ __forceinline__ int32_t innerStride(int k) const { return strides[0][k]; }
};

template <int NArgs, int MaxDims> struct OffsetCalc<NArgs, MaxDims, true> {
  using Index = int64_t;
  using Offset = int64_t;
  int rank = 0;
  int64_t sizes[MaxDims] = {};
  int64_t strides[MaxDims][NArgs] = {};

  __host__ explicit OffsetCalc(const StridedSpace<NArgs, MaxDims> &s) : rank(s.rank) {
    for (int d = 0; d < s.rank; ++d) {
      sizes[d] = s.sizes[d];
      for (int k = 0; k < NArgs; ++k) strides[d][k] = s.strides[d][k];
    }
  }
  __device__ __forceinline__ void get(int64_t linear, int64_t (&off)[NArgs]) const {
#pragma unroll
    for (int k = 0; k < NArgs; ++k) off[k] = 0;
#pragma unroll
    for (int d = 0; d < MaxDims; ++d) {
      if (d == rank) break;
      int64_t q = linear / sizes[d];
      int64_t r = linear - q * sizes[d];
      linear = q;
#pragma unroll
      for (int k = 0; k < NArgs; ++k) off[k] += r * strides[d][k];
    }
  }
  __device__ __forceinline__ int64_t innerStride(int k) const { return strides[0][k]; }
};

// True when every offset the space can produce, and its element count, fit
// in 31 bits (so OffsetCalc<..., false> is exact).
template <int NArgs, int MaxDims> bool fitsIn32Bits(const StridedSpace<NArgs, MaxDims> &s) {
  const int64_t limit = int64_t(1) << 31;
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.sizes[d];
  if (n >= limit) return false;
  for (int k = 0; k < NArgs; ++k) {
    int64_t reach = 0;
    for (int d = 0; d < s.rank; ++d) {
      int64_t st = s.strides[d][k] < 0 ? -s.strides[d][k] : s.strides[d][k];
      reach += (s.sizes[d] - 1) * st;
      if (reach >= limit) return false;
    }
  }
  return true;
}

// V elements of T loaded or stored at once (V * sizeof(T) bytes, aligned as such).
template <class T, int V> struct alignas(sizeof(T) * V) VecOf {
  T v[V];
};

inline bool isAligned(const void *p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

} // namespace megac::cuda
