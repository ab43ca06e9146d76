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

// One step t >= 1 over n elements. `gradScale` multiplies the gradient first
// (clipping, averaging of accumulated micro-batches).
void adamwUpdate(float *param, const float *grad, float *m, float *v, int64_t n, int64_t step, const AdamWHyper &h,
                 bool decay, float gradScale = 1.0f);

// The instruction-set paths of adamwUpdate (it takes the best one the CPU has):
// all round identically; the tests run each against the scalar one.
enum class AdamWIsa { Scalar, Avx2, Avx512 };
bool adamwIsaSupported(AdamWIsa isa);
AdamWIsa adamwBestIsa();
void adamwUpdateIsa(AdamWIsa isa, float *param, const float *grad, float *m, float *v, int64_t n, int64_t step,
                    const AdamWHyper &h, bool decay, float gradScale = 1.0f);

// The same, split over the kernel threads.
void adamwUpdateParallel(float *param, const float *grad, float *m, float *v, int64_t n, int64_t step,
                         const AdamWHyper &h, bool decay, float gradScale = 1.0f);

// A stretch of one parameter for adamwUpdateSegments.
struct AdamWSegment {
  float *param;
  const float *grad;
  float *m, *v;
  int64_t n;
  bool decay;
};

// Updates all segments (e.g. one unit's parameters) with one even split of
// their total length over `threads` threads.
void adamwUpdateSegments(const std::vector<AdamWSegment> &segments, int64_t step, const AdamWHyper &h,
                         float gradScale, int threads);

} // namespace megac::runtime
