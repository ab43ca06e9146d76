// exp in the Cephes style: x = n*ln2 + r with |r| <= ln2/2, exp(r) by a
// degree-6 polynomial, then 2^n put into the exponent bits.
#include "runtime/cpu/VecMath.h"

#include <algorithm>
#include <cmath>
#include <limits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MEGAC_VECMATH_X86 1
#endif

namespace megac::cpu {

namespace {

constexpr float kExpLow = -87.33654f; // below: the result is under FLT_MIN, flushed to 0
constexpr float kExpHigh = 88.72283f; // above: inf
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f, kP3 = 4.1665795894e-2f,
                kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

float rowMaxScalar(const float *x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

double expShiftedSumScalar(const float *x, float shift, float *y, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    float e = std::exp(x[i] - shift);
    if (y) y[i] = e;
    sum += double(e);
  }
  return sum;
}

#ifdef MEGAC_VECMATH_X86
// GCC 12's AVX-512 intrinsics use _mm512_undefined_* internally, which trips
// -Wuninitialized falsely (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

__attribute__((target("avx512f"))) inline __m512 exp512(__m512 x) {
  __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLow), _CMP_LT_OQ);
  __mmask16 huge = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpHigh), _CMP_GT_OQ);
  // max/min return their second operand when one is NaN: NaN stays NaN.
  x = _mm512_max_ps(_mm512_set1_ps(kExpLow), x);
  x = _mm512_min_ps(_mm512_set1_ps(kExpHigh), x);
  __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // 2^fx, fx in [-126, 128]; 128 (x near kExpHigh) is split in two factors.
  __m512i n = _mm512_cvtps_epi32(fx);
  __m512i half = _mm512_srai_epi32(n, 1);
  __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, _mm512_set1_epi32(127)), 23));
  __m512 s2 = _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(n, half), _mm512_set1_epi32(127)), 23));
  __m512 result = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  result = _mm512_mask_blend_ps(tiny, result, _mm512_setzero_ps());
  return _mm512_mask_blend_ps(huge, result, _mm512_set1_ps(std::numeric_limits<float>::infinity()));
}

__attribute__((target("avx512f"))) float rowMaxAvx512(const float *x, int64_t n) {
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_loadu_ps(x + i), m); // NaN in x: keeps m
  float r = _mm512_reduce_max_ps(m);
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

// Adds the 16 floats of v, widened to double, into acc.
__attribute__((target("avx512f"))) inline __m512d addWidened(__m512d acc, __m512 v) {
  acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
  __m512 upper = _mm512_shuffle_f32x4(v, v, 0xEE); // lanes 8..15 moved down
  return _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(upper)));
}

__attribute__((target("avx512f"))) double expShiftedSumAvx512(const float *x, float shift, float *y, int64_t n) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512d acc = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    if (y) _mm512_storeu_ps(y + i, e);
    acc = addWidened(acc, e);
  }
  if (i < n) {
    __mmask16 tail = __mmask16((1u << (n - i)) - 1);
    __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + i), s));
    e = _mm512_maskz_mov_ps(tail, e);
    if (y) _mm512_mask_storeu_ps(y + i, tail, e);
    acc = addWidened(acc, e);
  }
  return _mm512_reduce_add_pd(acc);
}

__attribute__((target("avx2,fma"))) inline __m256 exp256(__m256 x) {
  __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLow), _CMP_LT_OQ);
  __m256 huge = _mm256_cmp_ps(x, _mm256_set1_ps(kExpHigh), _CMP_GT_OQ);
  x = _mm256_max_ps(_mm256_set1_ps(kExpLow), x);
  x = _mm256_min_ps(_mm256_set1_ps(kExpHigh), x);
  __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i n = _mm256_cvtps_epi32(fx);
  __m256i half = _mm256_srai_epi32(n, 1);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(n, half), _mm256_set1_epi32(127)), 23));
  __m256 result = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  result = _mm256_andnot_ps(tiny, result);
  return _mm256_blendv_ps(result, _mm256_set1_ps(std::numeric_limits<float>::infinity()), huge);
}

// Adds the 8 floats of v, widened to double, into acc.
__attribute__((target("avx2,fma"))) inline __m256d addWidened(__m256d acc, __m256 v) {
  acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  return _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

__attribute__((target("avx2,fma"))) float rowMaxAvx2(const float *x, int64_t n) {
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float r = rowMaxScalar(lanes, 8);
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

__attribute__((target("avx2,fma"))) double expShiftedSumAvx2(const float *x, float shift, float *y, int64_t n) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256d acc = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    if (y) _mm256_storeu_ps(y + i, e);
    acc = addWidened(acc, e);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, acc);
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  if (i < n) {
    alignas(32) float in[8] = {}, out[8];
    for (int64_t k = i; k < n; ++k) in[k - i] = x[k];
    _mm256_store_ps(out, exp256(_mm256_sub_ps(_mm256_load_ps(in), s)));
    for (int64_t k = i; k < n; ++k) {
      if (y) y[k] = out[k - i];
      sum += double(out[k - i]);
    }
  }
  return sum;
}

#pragma GCC diagnostic pop
#endif

struct RowOps {
  float (*max)(const float *, int64_t);
  double (*expSum)(const float *, float, float *, int64_t);
};

const RowOps &rowOps() {
  static const RowOps ops = [] {
#ifdef MEGAC_VECMATH_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return RowOps{rowMaxAvx512, expShiftedSumAvx512};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return RowOps{rowMaxAvx2, expShiftedSumAvx2};
#endif
    return RowOps{rowMaxScalar, expShiftedSumScalar};
  }();
  return ops;
}

} // namespace

float rowMax(const float *x, int64_t n) { return rowOps().max(x, n); }

double expShiftedSum(const float *x, float shift, float *y, int64_t n) { return rowOps().expSum(x, shift, y, n); }

} // namespace megac::cpu
