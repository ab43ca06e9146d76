#pragma once
// Single-precision matrix products on row-major data, shared by the MatMul
// and Gemm kernels and by backward (gradient) products.
//
//   C = alpha * op(A) * op(B) + beta * C
//
// op(A) is M x K: A is M x K (lda >= K), or K x M when transA (lda >= M).
// op(B) is K x N: B is K x N (ldb >= N), or N x K when transB (ldb >= K).
// C is M x N with ldc >= N. As in BLAS, beta == 0 overwrites C without reading
// it (NaNs already in C do not propagate).
//
// The kernel is cache-blocked with packed panels and a register-blocked
// micro-kernel chosen at run time (AVX-512, AVX2+FMA, or portable C++).
#include <cstdint>

namespace megac::cpu {

// Splits the product across numThreads() threads when it is large enough.
void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
           const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

// The same product on the calling thread only: for callers that already run
// many independent products in parallel (batched MatMul).
void sgemmSerial(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

// Rounding applied to both operands as they are packed, before the fp32
// products: the CPU backend's emulation of the GPU's compute modes. bf16
// rounds to nearest even at 8 significant bits (as the GPU packs its bf16
// operands), tf32 at 11 (to nearest even; the tensor cores' own conversion of
// fp32 operands may differ in the last bit). Accumulation stays fp32.
enum class OperandRounding { None, Bf16, Tf32 };
OperandRounding sgemmOperandRounding();
// Sets it for every sgemm call in the process until changed; not thread-safe
// against products running at the same time.
void setSgemmOperandRounding(OperandRounding r);
// Rounds one value as the products round their operands.
float roundOperand(float x, OperandRounding r);

// Name of the micro-kernel in use ("avx512 12x32", "avx2 6x16", "generic 4x8").
const char *sgemmKernelName();

// Selects the micro-kernel by family ("avx512", "avx2", "generic"; the
// default is the fastest this CPU supports). For tests and benchmarks; not
// thread-safe. Returns false, changing nothing, when the CPU lacks it.
bool setSgemmKernel(const char *family);

} // namespace megac::cpu
