#include "runtime/train/AdamW.h"

#include "runtime/cpu/Kernel.h"

#include <cmath>

namespace megac::runtime {

// One clone per instruction set, chosen at load time (AVX-512, AVX2, baseline).
__attribute__((target_clones("avx512f", "avx2", "default"))) void adamwUpdate(float *__restrict param, const float *__restrict grad, float *__restrict m, float *__restrict v,
                 int64_t n, int64_t step, const AdamWHyper &h, bool decay, float gradScale) {
  // torch: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  //        p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
  const double bc1 = 1.0 - std::pow(double(h.beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(h.beta2), double(step));
  const float stepSize = float(double(h.lr) / bc1);
  const float invBc2Sqrt = float(1.0 / std::sqrt(bc2));
  const float decayFactor = decay ? 1.0f - h.lr * h.weightDecay : 1.0f;
  const float b1 = h.beta1, b2 = h.beta2, eps = h.eps;
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] * gradScale;
    float p = param[i] * decayFactor;
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = p - stepSize * mi / (std::sqrt(vi) * invBc2Sqrt + eps);
  }
}

void adamwUpdateParallel(float *param, const float *grad, float *m, float *v, int64_t n, int64_t step,
                         const AdamWHyper &h, bool decay, float gradScale) {
  cpu::parallelFor(n, 16, [&](int64_t b, int64_t e) {
    adamwUpdate(param + b, grad + b, m + b, v + b, e - b, step, h, decay, gradScale);
  });
}

} // namespace megac::runtime
