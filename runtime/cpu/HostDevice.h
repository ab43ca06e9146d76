#pragma once
// Marks the functions that both backends compile: the CPU kernels (plain C++)
// and the CUDA kernels (nvcc, which also needs them on the device). The op
// semantics in runtime/cpu/*Ops.h use it, so each formula is written once.
#ifdef __CUDACC__
#define MEGAC_HD __host__ __device__
#define MEGAC_HD_INLINE __host__ __device__ __forceinline__
#else
#define MEGAC_HD
#define MEGAC_HD_INLINE inline
#endif
