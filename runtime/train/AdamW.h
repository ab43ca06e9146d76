#pragma once
// AdamW on fp32 host arrays, exactly as torch.optim.AdamW (decoupled weight
// decay, bias correction). AVX-512 with non-temporal stores, or AVX2, chosen
// at run time; split across threads by the caller or by adamwUpdateParallel.
#include <cstdint>
#include <vector>

namespace megac::runtime {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weightDecay = 0.01f;
};

// The per-step constants of the update of one parameter:
//   g = grad * gradScale; m = fma(b1, m, c1 * g); v = fma(b2, v, c2 * (g * g));
//   den = fma(sqrt(v), invBc2Sqrt, eps); p = fma(-stepSize, m / den, p * decay)
// (torch.optim.AdamW's arithmetic, bias corrections folded in). Every path,
// the GPU's included (runtime/cuda/AdamWKernels.h), rounds exactly this way.
struct AdamWCoefficients {
  float b1, c1, b2, c2, stepSize, invBc2Sqrt, eps, decay, gradScale;
};
AdamWCoefficients adamwCoefficients(int64_t step, const AdamWHyper &h, bool decay, float gradScale = 1.0f);

// One step t >= 1 over n elements. `gradScale` multiplies the gradient first
// (clipping, averaging of accumulated micro-batches). With `bf16`, each new
// weight's bf16 rounding (to nearest even, as floatToBf16 and the GPU's
// packing) is written there too (weights streamed as bf16,
// runtime/plan/Bf16Weights.h): 2 bytes beside the 28 the update moves.
// A null `grad` is a zero gradient, rounded as one: the rows of a
// token-indexed table that no token read (runtime/plan/TokenRows.h).
void adamwUpdate(float *param, const float *grad, float *m, float *v, int64_t n, int64_t step, const AdamWHyper &h,
                 bool decay, float gradScale = 1.0f, uint16_t *bf16 = nullptr);

// The instruction-set paths of adamwUpdate (it takes the best one the CPU has):
// all round identically; the tests run each against the scalar one.
enum class AdamWIsa { Scalar, Avx2, Avx512 };
bool adamwIsaSupported(AdamWIsa isa);
AdamWIsa adamwBestIsa();
void adamwUpdateIsa(AdamWIsa isa, float *param, const float *grad, float *m, float *v, int64_t n, int64_t step,
                    const AdamWHyper &h, bool decay, float gradScale = 1.0f, uint16_t *bf16 = nullptr);

// The same, split over the kernel threads.
void adamwUpdateParallel(float *param, const float *grad, float *m, float *v, int64_t n, int64_t step,
                         const AdamWHyper &h, bool decay, float gradScale = 1.0f, uint16_t *bf16 = nullptr);

// A stretch of one parameter for adamwUpdateSegments.
struct AdamWSegment {
  float *param;
  const float *grad; // null: a zero gradient
  float *m, *v;
  int64_t n;
  bool decay;
  uint16_t *bf16 = nullptr; // the new weights' bf16 rounding goes here too, where given
};

// Updates all segments (e.g. one unit's parameters) with one even split of
// their total length over `threads` threads.
void adamwUpdateSegments(const std::vector<AdamWSegment> &segments, int64_t step, const AdamWHyper &h,
                         float gradScale, int threads);

} // namespace megac::runtime
