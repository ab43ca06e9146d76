#include "runtime/train/AdamW.h"

#include "runtime/core/DType.h"
#include "runtime/cpu/Kernel.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cmath>
#include <thread>

namespace megac::runtime {

AdamWCoefficients adamwCoefficients(int64_t step, const AdamWHyper &h, bool decay, float gradScale) {
  const double bc1 = 1.0 - std::pow(double(h.beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(h.beta2), double(step));
  return {h.beta1,      1.0f - h.beta1, h.beta2, 1.0f - h.beta2, float(double(h.lr) / bc1), float(1.0 / std::sqrt(bc2)),
          h.eps,        decay ? 1.0f - h.lr * h.weightDecay : 1.0f, gradScale};
}

namespace {

// torch: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//        p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// Every path below rounds exactly as `one` does (the same fused multiply-adds in
// the same order), so where a thread's range starts never changes a result.
using Coefficients = AdamWCoefficients;

inline void one(float &p, float grad, float &m, float &v, const Coefficients &k) {
  const float g = grad * k.gradScale;
  const float mi = std::fma(k.b1, m, k.c1 * g);
  const float vi = std::fma(k.b2, v, k.c2 * (g * g));
  const float den = std::fma(std::sqrt(vi), k.invBc2Sqrt, k.eps);
  m = mi;
  v = vi;
  p = std::fma(-k.stepSize, mi / den, p * k.decay);
}

// A null gradient is a zero one (adamwUpdate's).
inline float gradAt(const float *grad, int64_t i) { return grad ? grad[i] : 0.0f; }

// The same, and the new weight's bf16 rounding where `bf16` is given.
inline void one(float &p, float grad, float &m, float &v, const Coefficients &k, uint16_t *bf16) {
  one(p, grad, m, v, k);
  if (bf16) *bf16 = floatToBf16(p);
}

// The update reads and writes 28 bytes per parameter (30 with the bf16 copy)
// and computes little: it runs at the host's memory bandwidth. Non-temporal
// stores for p, m, v and the bf16 copy (written once, read again only by the
// next step or the H2D copy) skip the cache on the way out: on the H200
// machine, 16 threads went from 3.3-4.2 to 4.6-5.0 G params/s with them; a
// plain store first reads its line, 2 more bytes a parameter for the bf16
// copy (AVX-512 only; an AVX2 CPU gets the compiler's vectorized loop with
// plain stores). They need aligned addresses: the head runs scalar until p is
// aligned, and an array whose alignment differs from p's is stored plainly.
// GCC 12 flags the _mm512_undefined_ps() inside its own _mm512_sqrt_ps.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// floatToBf16 on 16 lanes: round to nearest even; NaN to 0x7fc0.
__attribute__((target("avx512f"))) inline __m256i bf16Avx512(__m512 p) {
  const __m512i bits = _mm512_castps_si512(p);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q), _mm512_set1_epi32(0x7fc0));
  return _mm512_cvtepi32_epi16(r);
}

__attribute__((target("avx512f"))) void updateAvx512(float *__restrict param, const float *__restrict grad,
                                                     float *__restrict m, float *__restrict v, int64_t n,
                                                     const Coefficients &k, uint16_t *__restrict bf16) {
  int64_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(param + i) & 63) != 0; ++i)
    one(param[i], gradAt(grad, i), m[i], v[i], k, bf16 ? bf16 + i : nullptr);
  const bool mAligned = (reinterpret_cast<uintptr_t>(m + i) & 63) == 0;
  const bool vAligned = (reinterpret_cast<uintptr_t>(v + i) & 63) == 0;
  const bool bf16Aligned = bf16 && (reinterpret_cast<uintptr_t>(bf16 + i) & 31) == 0;
  const __m512 b1 = _mm512_set1_ps(k.b1), c1 = _mm512_set1_ps(k.c1), b2 = _mm512_set1_ps(k.b2),
               c2 = _mm512_set1_ps(k.c2), negStep = _mm512_set1_ps(-k.stepSize),
               invBc2Sqrt = _mm512_set1_ps(k.invBc2Sqrt), eps = _mm512_set1_ps(k.eps),
               decay = _mm512_set1_ps(k.decay), gradScale = _mm512_set1_ps(k.gradScale);
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_mul_ps(grad ? _mm512_loadu_ps(grad + i) : _mm512_setzero_ps(), gradScale);
    const __m512 mi = _mm512_fmadd_ps(b1, _mm512_loadu_ps(m + i), _mm512_mul_ps(c1, g));
    const __m512 vi = _mm512_fmadd_ps(b2, _mm512_loadu_ps(v + i), _mm512_mul_ps(c2, _mm512_mul_ps(g, g)));
    const __m512 den = _mm512_fmadd_ps(_mm512_sqrt_ps(vi), invBc2Sqrt, eps);
    const __m512 p = _mm512_fmadd_ps(negStep, _mm512_div_ps(mi, den), _mm512_mul_ps(_mm512_load_ps(param + i), decay));
    if (mAligned) _mm512_stream_ps(m + i, mi);
    else _mm512_storeu_ps(m + i, mi);
    if (vAligned) _mm512_stream_ps(v + i, vi);
    else _mm512_storeu_ps(v + i, vi);
    _mm512_stream_ps(param + i, p);
    if (bf16Aligned) _mm256_stream_si256(reinterpret_cast<__m256i *>(bf16 + i), bf16Avx512(p));
    else if (bf16) _mm256_storeu_si256(reinterpret_cast<__m256i *>(bf16 + i), bf16Avx512(p));
  }
  for (; i < n; ++i) one(param[i], gradAt(grad, i), m[i], v[i], k, bf16 ? bf16 + i : nullptr);
  _mm_sfence(); // the streamed stores are visible before the caller signals that the update is done
}
#pragma GCC diagnostic pop

void updateScalar(float *param, const float *grad, float *m, float *v, int64_t n, const Coefficients &k,
                  uint16_t *bf16) {
  for (int64_t i = 0; i < n; ++i) one(param[i], gradAt(grad, i), m[i], v[i], k, bf16 ? bf16 + i : nullptr);
}

// The same loop, vectorized by the compiler for AVX2 (plain stores); the
// bf16 rounding after it, over the weights just written (still in cache).
__attribute__((target("avx2,fma"))) void updateAvx2(float *__restrict param, const float *__restrict grad,
                                                   float *__restrict m, float *__restrict v, int64_t n,
                                                   const Coefficients &k, uint16_t *__restrict bf16) {
  if (grad)
    for (int64_t i = 0; i < n; ++i) one(param[i], grad[i], m[i], v[i], k);
  else
    for (int64_t i = 0; i < n; ++i) one(param[i], 0.0f, m[i], v[i], k);
  if (bf16)
    for (int64_t i = 0; i < n; ++i) bf16[i] = floatToBf16(param[i]);
}

using UpdateFn = void (*)(float *, const float *, float *, float *, int64_t, const Coefficients &, uint16_t *);

UpdateFn updateFor(AdamWIsa isa) {
  switch (isa) {
  case AdamWIsa::Avx512: return updateAvx512;
  case AdamWIsa::Avx2: return updateAvx2;
  case AdamWIsa::Scalar: break;
  }
  return updateScalar;
}

} // namespace

bool adamwIsaSupported(AdamWIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
  case AdamWIsa::Avx512: return __builtin_cpu_supports("avx512f");
  case AdamWIsa::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  case AdamWIsa::Scalar: return true;
  }
  return false;
}

AdamWIsa adamwBestIsa() {
  for (AdamWIsa isa : {AdamWIsa::Avx512, AdamWIsa::Avx2})
    if (adamwIsaSupported(isa)) return isa;
  return AdamWIsa::Scalar;
}

void adamwUpdateIsa(AdamWIsa isa, float *param, const float *grad, float *m, float *v, int64_t n, int64_t step,
                    const AdamWHyper &h, bool decay, float gradScale, uint16_t *bf16) {
  updateFor(isa)(param, grad, m, v, n, adamwCoefficients(step, h, decay, gradScale), bf16);
}

void adamwUpdate(float *param, const float *grad, float *m, float *v, int64_t n, int64_t step, const AdamWHyper &h,
                 bool decay, float gradScale, uint16_t *bf16) {
  static const UpdateFn update = updateFor(adamwBestIsa());
  update(param, grad, m, v, n, adamwCoefficients(step, h, decay, gradScale), bf16);
}

namespace {

// Runs fn over [0, total) in chunks of 256 Ki elements (1 MB of each array)
// that `threads` threads take in turn: a thread the OS delays costs a chunk,
// not its even share (streamed, an even split ran at 3.7-5.0 G params/s on
// the H200 machine, chunks taken in turn at 4.6-4.9).
void forChunks(int64_t total, int threads, const std::function<void(int64_t, int64_t)> &fn) {
  constexpr int64_t kChunk = int64_t(1) << 18;
  const int64_t chunks = (total + kChunk - 1) / kChunk;
  const int workers = int(std::min<int64_t>(std::max(threads, 1), chunks));
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t c; (c = next.fetch_add(1)) < chunks;) fn(c * kChunk, std::min(total, (c + 1) * kChunk));
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (std::thread &t : pool) t.join();
}

} // namespace

void adamwUpdateParallel(float *param, const float *grad, float *m, float *v, int64_t n, int64_t step,
                         const AdamWHyper &h, bool decay, float gradScale, uint16_t *bf16) {
  forChunks(n, cpu::numThreads(), [&](int64_t b, int64_t e) {
    adamwUpdate(param + b, grad + b, m + b, v + b, e - b, step, h, decay, gradScale, bf16 ? bf16 + b : nullptr);
  });
}

void adamwUpdateSegments(const std::vector<AdamWSegment> &segments, int64_t step, const AdamWHyper &h,
                         float gradScale, int threads) {
  // starts[j]: segment j's first element in the concatenation (a chunk
  // finds its first segment by bisection: a table's rows may be thousands).
  std::vector<int64_t> starts(segments.size() + 1, 0);
  for (size_t j = 0; j < segments.size(); ++j) starts[j + 1] = starts[j] + segments[j].n;
  forChunks(starts.back(), threads, [&](int64_t b, int64_t e) {
    size_t j = size_t(std::upper_bound(starts.begin(), starts.end(), b) - starts.begin()) - 1;
    for (; j < segments.size() && starts[j] < e; ++j) {
      const AdamWSegment &s = segments[j];
      const int64_t at = starts[j], lo = std::max(b, at), hi = std::min(e, at + s.n);
      if (lo < hi)
        adamwUpdate(s.param + (lo - at), s.grad ? s.grad + (lo - at) : nullptr, s.m + (lo - at), s.v + (lo - at),
                    hi - lo, step, h, s.decay, gradScale, s.bf16 ? s.bf16 + (lo - at) : nullptr);
    }
  });
}

} // namespace megac::runtime
