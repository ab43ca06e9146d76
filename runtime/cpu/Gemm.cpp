// Cache-blocked SGEMM in the BLIS style: op(B) is packed into K-by-NR strips
// (a panel that stays in L2/L3), op(A) into MR-by-K strips (a block that
// stays in L2), and a register-blocked micro-kernel multiplies one A strip by
// one B strip. Threads split C into independent tiles.
#include "runtime/cpu/Gemm.h"

#include "runtime/cpu/Kernel.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MEGAC_GEMM_X86 1
#endif

namespace megac::cpu {

namespace {

// c[MR x NR] (row stride ldc) = (accumulate ? c : 0) + sum_k a[k][0..MR) * b[k][0..NR)
using MicroKernelFn = void (*)(int64_t K, const float *a, const float *b, float *c, int64_t ldc, bool accumulate);

struct MicroKernel {
  int mr, nr;
  MicroKernelFn fn;
  const char *name;
};

constexpr int64_t kBlockK = 256;  // KC: depth of the packed panels
constexpr int64_t kBlockM = 192;  // MC: rows of A packed at a time (rounded to MR)
constexpr int64_t kBlockN = 4096; // NC: columns of B packed at a time (rounded to NR)

// --- Portable micro-kernel (the compiler vectorizes the inner j loop). ---
constexpr int kGenericMR = 4, kGenericNR = 8;

void microKernelGeneric(int64_t K, const float *a, const float *b, float *c, int64_t ldc, bool accumulate) {
  float acc[kGenericMR][kGenericNR] = {};
  for (int64_t k = 0; k < K; ++k) {
    const float *ak = a + k * kGenericMR, *bk = b + k * kGenericNR;
    for (int i = 0; i < kGenericMR; ++i)
      for (int j = 0; j < kGenericNR; ++j) acc[i][j] += ak[i] * bk[j];
  }
  for (int i = 0; i < kGenericMR; ++i)
    for (int j = 0; j < kGenericNR; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.0f) + acc[i][j];
}

#ifdef MEGAC_GEMM_X86
// --- AVX2 + FMA: 6 x 16 (12 accumulator registers). ---
__attribute__((target("avx2,fma"))) void microKernelAvx2(int64_t K, const float *a, const float *b, float *c,
                                                         int64_t ldc, bool accumulate) {
  __m256 acc[6][2];
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += 6;
    b += 16;
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {
    float *ci = c + i * ldc;
    if (accumulate) {
      acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_loadu_ps(ci));
      acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_loadu_ps(ci + 8));
    }
    _mm256_storeu_ps(ci, acc[i][0]);
    _mm256_storeu_ps(ci + 8, acc[i][1]);
  }
}

// --- AVX-512: 12 x 32 (24 accumulator registers). ---
__attribute__((target("avx512f"))) void microKernelAvx512(int64_t K, const float *a, const float *b, float *c,
                                                          int64_t ldc, bool accumulate) {
  __m512 acc[12][2];
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    _mm_prefetch(reinterpret_cast<const char *>(b + 8 * 32), _MM_HINT_T0);
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) {
      __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += 12;
    b += 32;
  }
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) {
    float *ci = c + i * ldc;
    if (accumulate) {
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_loadu_ps(ci));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_loadu_ps(ci + 16));
    }
    _mm512_storeu_ps(ci, acc[i][0]);
    _mm512_storeu_ps(ci + 16, acc[i][1]);
  }
}
#endif

const MicroKernel kGenericKernel{kGenericMR, kGenericNR, microKernelGeneric, "generic 4x8"};
#ifdef MEGAC_GEMM_X86
const MicroKernel kAvx2Kernel{6, 16, microKernelAvx2, "avx2 6x16"};
const MicroKernel kAvx512Kernel{12, 32, microKernelAvx512, "avx512 12x32"};
#endif

// The kernel of a family if this CPU can run it, else nullptr.
const MicroKernel *kernelFamily(llvm::StringRef family) {
  if (family == "generic") return &kGenericKernel;
#ifdef MEGAC_GEMM_X86
  __builtin_cpu_init();
  if (family == "avx2" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &kAvx2Kernel;
  if (family == "avx512" && __builtin_cpu_supports("avx512f")) return &kAvx512Kernel;
#endif
  return nullptr;
}

const MicroKernel *&currentKernel() {
  static const MicroKernel *k = [] {
    // MEGAC_GEMM_KERNEL picks a family (benchmarks); otherwise the fastest available.
    if (const char *e = std::getenv("MEGAC_GEMM_KERNEL"))
      if (const MicroKernel *forced = kernelFamily(e)) return forced;
    for (const char *family : {"avx512", "avx2"})
      if (const MicroKernel *k = kernelFamily(family)) return k;
    return &kGenericKernel;
  }();
  return k;
}

const MicroKernel &selectMicroKernel() { return *currentKernel(); }

struct AlignedFloats {
  std::unique_ptr<float, decltype(&std::free)> p{nullptr, &std::free};
  explicit AlignedFloats(int64_t n) {
    size_t bytes = (size_t(std::max<int64_t>(n, 1)) * sizeof(float) + 63) / 64 * 64;
    p.reset(static_cast<float *>(std::aligned_alloc(64, bytes)));
    if (!p) throw std::bad_alloc();
  }
  float *get() const { return p.get(); }
};

std::atomic<OperandRounding> gOperandRounding{OperandRounding::None};

// The operands as the blocked loops see them: op(A) is M x K, op(B) is K x N.
struct Operands {
  bool transA, transB;
  const float *A;
  int64_t lda;
  const float *B;
  int64_t ldb;
  float alpha;
  OperandRounding rounding = gOperandRounding.load(std::memory_order_relaxed);
  float in(float x) const { return rounding == OperandRounding::None ? x : roundOperand(x, rounding); }
};

// Packs op(A)[i0:i0+mc, k0:k0+kc] * alpha into MR-row strips, k-major within a
// strip; rows past mc are zero.
void packA(const Operands &o, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int mr, float *dst) {
  for (int64_t s = 0; s < mc; s += mr) {
    int64_t rows = std::min<int64_t>(mr, mc - s);
    float *d = dst + s * kc;
    if (o.transA) { // element (i, k) at A[k * lda + i]: a strip's MR values per k are contiguous
      for (int64_t k = 0; k < kc; ++k) {
        const float *src = o.A + (k0 + k) * o.lda + i0 + s;
        float *dk = d + k * mr;
        int64_t i = 0;
        for (; i < rows; ++i) dk[i] = o.alpha * o.in(src[i]);
        for (; i < mr; ++i) dk[i] = 0.0f;
      }
    } else { // element (i, k) at A[i * lda + k]
      for (int64_t i = 0; i < rows; ++i) {
        const float *src = o.A + (i0 + s + i) * o.lda + k0;
        for (int64_t k = 0; k < kc; ++k) d[k * mr + i] = o.alpha * o.in(src[k]);
      }
      for (int64_t i = rows; i < mr; ++i)
        for (int64_t k = 0; k < kc; ++k) d[k * mr + i] = 0.0f;
    }
  }
}

// Packs op(B)[k0:k0+kc, j0:j0+nc] into NR-column strips, k-major within a
// strip; columns past nc are zero.
void packB(const Operands &o, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr, float *dst) {
  for (int64_t s = 0; s < nc; s += nr) {
    int64_t cols = std::min<int64_t>(nr, nc - s);
    float *d = dst + s * kc;
    if (!o.transB) { // element (k, j) at B[k * ldb + j]
      for (int64_t k = 0; k < kc; ++k) {
        const float *src = o.B + (k0 + k) * o.ldb + j0 + s;
        float *dk = d + k * nr;
        int64_t j = 0;
        for (; j < cols; ++j) dk[j] = o.in(src[j]);
        for (; j < nr; ++j) dk[j] = 0.0f;
      }
    } else { // element (k, j) at B[j * ldb + k]
      for (int64_t j = 0; j < cols; ++j) {
        const float *src = o.B + (j0 + s + j) * o.ldb + k0;
        for (int64_t k = 0; k < kc; ++k) d[k * nr + j] = o.in(src[k]);
      }
      for (int64_t j = cols; j < nr; ++j)
        for (int64_t k = 0; k < kc; ++k) d[k * nr + j] = 0.0f;
    }
  }
}

void scaleC(int64_t M, int64_t N, float beta, float *C, int64_t ldc) {
  if (beta == 1.0f) return;
  for (int64_t i = 0; i < M; ++i) {
    float *row = C + i * ldc;
    if (beta == 0.0f) std::fill(row, row + N, 0.0f);
    else
      for (int64_t j = 0; j < N; ++j) row[j] *= beta;
  }
}

// C[0:M, 0:N] = op(A)[row0:row0+M, :] * op(B)[:, col0:col0+N] * alpha + beta * C,
// on the calling thread.
void gemmTile(const MicroKernel &uk, const Operands &o, int64_t row0, int64_t col0, int64_t M, int64_t N, int64_t K,
              float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || o.alpha == 0.0f) {
    scaleC(M, N, beta, C, ldc);
    return;
  }
  if (beta != 0.0f && beta != 1.0f) {
    scaleC(M, N, beta, C, ldc);
    beta = 1.0f;
  }
  const int mr = uk.mr, nr = uk.nr;
  const int64_t mcMax = std::max<int64_t>(kBlockM / mr, 1) * mr;
  const int64_t ncMax = std::min<int64_t>(kBlockN / nr * nr, (N + nr - 1) / nr * nr);
  const int64_t kcMax = std::min<int64_t>(kBlockK, K);
  AlignedFloats packedA(mcMax * kcMax), packedB(kcMax * ncMax);
  alignas(64) float edge[32 * 32];

  for (int64_t jc = 0; jc < N; jc += ncMax) {
    int64_t nc = std::min(ncMax, N - jc);
    for (int64_t pc = 0; pc < K; pc += kcMax) {
      int64_t kc = std::min(kcMax, K - pc);
      bool accumulate = pc > 0 || beta != 0.0f;
      packB(o, pc, kc, col0 + jc, nc, nr, packedB.get());
      for (int64_t ic = 0; ic < M; ic += mcMax) {
        int64_t mc = std::min(mcMax, M - ic);
        packA(o, row0 + ic, mc, pc, kc, mr, packedA.get());
        for (int64_t jr = 0; jr < nc; jr += nr) {
          int64_t cols = std::min<int64_t>(nr, nc - jr);
          const float *bStrip = packedB.get() + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += mr) {
            int64_t rows = std::min<int64_t>(mr, mc - ir);
            const float *aStrip = packedA.get() + ir * kc;
            float *c = C + (ic + ir) * ldc + jc + jr;
            if (rows == mr && cols == nr) {
              uk.fn(kc, aStrip, bStrip, c, ldc, accumulate);
              continue;
            }
            uk.fn(kc, aStrip, bStrip, edge, nr, false);
            for (int64_t i = 0; i < rows; ++i)
              for (int64_t j = 0; j < cols; ++j)
                c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.0f) + edge[i * nr + j];
          }
        }
      }
    }
  }
}

} // namespace

const char *sgemmKernelName() { return selectMicroKernel().name; }

bool setSgemmKernel(const char *family) {
  const MicroKernel *k = kernelFamily(family);
  if (k) currentKernel() = k;
  return k != nullptr;
}

void sgemmSerial(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  Operands o{transA, transB, A, lda, B, ldb, alpha};
  gemmTile(selectMicroKernel(), o, 0, 0, M, N, K, beta, C, ldc);
}

void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
           const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  const MicroKernel &uk = selectMicroKernel();
  Operands o{transA, transB, A, lda, B, ldb, alpha};
  int threads = numThreads();
  double flops = 2.0 * double(M) * double(N) * double(K);
  if (threads <= 1 || flops < 4.0e6) {
    gemmTile(uk, o, 0, 0, M, N, K, beta, C, ldc);
    return;
  }
  // A grid of tm x tn tiles, one per thread. Splitting M is preferred: each
  // thread then packs all of op(B), which is cheap next to its share of the
  // products as long as its tile keeps a few micro-kernel rows.
  int64_t tm = 1, tn = 1;
  for (int t = threads; t >= 1; --t) {
    if (threads % t) continue;
    int64_t ttn = threads / t;
    if (M / t >= 2 * uk.mr && N / ttn >= uk.nr) {
      tm = t;
      tn = ttn;
      break;
    }
  }
  if (tm * tn == 1) {
    if (N / threads >= 2 * uk.nr) tn = threads;
    else if (M / threads >= uk.mr) tm = threads;
  }
  if (tm * tn == 1) {
    gemmTile(uk, o, 0, 0, M, N, K, beta, C, ldc);
    return;
  }
  // Tile boundaries on micro-kernel multiples so edges fall at the matrix end only.
  auto bound = [](int64_t extent, int64_t parts, int64_t unit, int64_t p) {
    int64_t units = (extent + unit - 1) / unit;
    return std::min(extent, (units * p / parts) * unit);
  };
  parallelFor(tm * tn, int64_t(1) << 40, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t ti = t / tn, tj = t % tn;
      int64_t r0 = bound(M, tm, uk.mr, ti), r1 = bound(M, tm, uk.mr, ti + 1);
      int64_t c0 = bound(N, tn, uk.nr, tj), c1 = bound(N, tn, uk.nr, tj + 1);
      gemmTile(uk, o, r0, c0, r1 - r0, c1 - c0, K, beta, C + r0 * ldc + c0, ldc);
    }
  });
}

float roundOperand(float x, OperandRounding r) {
  if (r == OperandRounding::None || !std::isfinite(x)) return x;
  const int dropped = r == OperandRounding::Bf16 ? 16 : 13; // low mantissa bits cleared
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t half = (uint32_t(1) << (dropped - 1)) - 1, lsb = (u >> dropped) & 1;
  u = (u + half + lsb) & ~((uint32_t(1) << dropped) - 1); // to nearest, ties to even
  std::memcpy(&x, &u, 4);
  return x;
}

OperandRounding sgemmOperandRounding() { return gOperandRounding.load(); }
void setSgemmOperandRounding(OperandRounding r) { gOperandRounding.store(r); }

} // namespace megac::cpu
