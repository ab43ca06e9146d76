#pragma once
// Strided-batched fp32 matrix products through cuBLASLt, stated in row-major
// terms. The MatMul/Gemm and Attention kernels use it; so can any kernel that
// needs a GEMM.
//
// For i in [0, batch):
//   C_i = alpha * op(A_i) * op(B_i) + beta * C_i (+ bias broadcast over rows)
// where op(A_i) is m x k, op(B_i) is k x n and C_i is m x n, all row-major:
//   A_i = a + i * strideA, stored [m, k] (or [k, m] when transA) with row stride lda,
//   B_i = b + i * strideB, stored [k, n] (or [n, k] when transB) with row stride ldb,
//   C_i = c + i * strideC, stored [m, n] with row stride ldc.
// A stride of 0 reuses one matrix for the whole batch (broadcasting). A
// leading dimension of 0 means "packed" (the stored matrix's column count).
// Tensors are fp32; ctx.gpu.mode picks the arithmetic: BF16 -> bf16 tensor-core
// products with fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF), TF32 ->
// CUBLAS_COMPUTE_32F_FAST_TF32, FP32 -> CUBLAS_COMPUTE_32F.
// beta == 0 never reads C (NaNs there do not propagate). k == 0 gives
// C = beta * C (+ bias). The work is enqueued on ctx.stream with
// ctx.gemmWorkspace; nothing synchronizes. Descriptors and the heuristic's
// algorithm are cached per shape/stride/alignment/mode (host side, thread-safe).
#include "runtime/cuda/GpuKernel.h"

#include "llvm/Support/Error.h"

#include <cstdint>

namespace megac::cuda {

struct LtGemm {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  const float *a = nullptr;
  int64_t lda = 0, strideA = 0;
  bool transA = false;
  const float *b = nullptr;
  int64_t ldb = 0, strideB = 0;
  bool transB = false;
  float *c = nullptr;
  int64_t ldc = 0, strideC = 0;
  float alpha = 1, beta = 0;
  // Optional, one matrix (batch 1): the C that beta scales is read from here
  // (stored like c, rows ldc apart), and the result still goes to c, so that
  // C = alpha * op(A) op(B) + beta * cIn costs no copy of cIn first.
  const float *cIn = nullptr;
  // Optional [n] vector added to every row of every C_i (a cuBLASLt epilogue
  // where one applies, else a small kernel before the product).
  const float *bias = nullptr;
  // BF16 mode: device scratch where A and B are packed to bf16 for a native
  // bf16 product; plan::bf16PackBytes says how much. Without it (or when too
  // small) cuBLASLt converts fp32 operands itself (FAST_16BF), at about half
  // the rate.
  void *scratch = nullptr;
  size_t scratchBytes = 0;
  // BF16 mode: an operand stored without padding inside a weight slot is
  // read from the slot's bf16 copy (GpuContext::weightCopies), not packed.
  // BF16 mode, optional: B already packed to bf16 by ltPackBf16 (one matrix,
  // stored rows x cols with ldb == cols, strideB 0 or batch 1), for a B that
  // several products share. ltMatmul then packs only A, in
  // plan::bf16PackBytes(elemsA, 0) of scratch. b must still be the fp32 B:
  // the products that run on fp32 operands read it.
  const void *bPackedBf16 = nullptr;
  // C = alpha op(A) op(B) + beta C rounded once, as a product computed apart
  // and then added would be: no algorithm that adds split-K partial products
  // into C one at a time (cuBLASLt's in-place reduction). Set for products
  // whose C holds a sum they add to, and for the first of that sum's terms,
  // so that both take the same algorithm.
  bool roundOnce = false;
  // BF16 mode: how A and B use the pack cache (GpuContext::packCache,
  // runtime/plan/PackCache.h): kPackFind reads a copy an earlier product
  // stored there; kPackStore also stores this operand's copy where there is
  // none and the cache has room. A product's operands as the program gives
  // them, never a kernel's own buffers.
  uint8_t cacheA = 0, cacheB = 0;
};
inline constexpr uint8_t kPackFind = 1, kPackStore = 2;

// plan::bf16PackBytes(elemsA, elemsB) of scratch lets ltMatmul pack operands
// of at most that many elements (as stored, strides included) to bf16.

llvm::Error ltMatmul(GpuContext &ctx, const LtGemm &g);

// dst[0, elems) = bf16(src[0, elems)) on ctx.stream, rounded as ltMatmul
// packs its operands; dst holds plan::bf16PackBytes(elems, 0) bytes.
llvm::Error ltPackBf16(GpuContext &ctx, void *dst, const float *src, int64_t elems);
// The same on `stream` (the trainer's copies of the weight slots, on the H2D stream).
llvm::Error packBf16On(cudaStream_t stream, void *dst, const float *src, int64_t elems);
// The other way, on `stream`: dst[i] = float(src[i]) (bf16, exact), for i < elems.
llvm::Error unpackBf16On(cudaStream_t stream, float *dst, const void *src, int64_t elems);

// bf16 mode: the bf16 copy of fp32 [p, p + elems) where it lies inside one of
// ctx.weightCopies, else nullptr. Each copy found is counted (weightCopyReads).
const void *weightCopyOf(const GpuContext &ctx, const float *p, int64_t elems);
// Operands read from a weight slot's bf16 copy so far, in this process (tests read it).
uint64_t weightCopyReads();
// Operands stored in / read from the pack cache so far, in this process (tests read them).
uint64_t packCacheStores();
uint64_t packCacheFinds();

// The cuBLASLt compute type a mode stands for.
cublasComputeType_t ltComputeType(ComputeMode mode);

} // namespace megac::cuda
