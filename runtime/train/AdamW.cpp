#include "runtime/train/AdamW.h"

#include "runtime/cpu/Kernel.h"

#include <algorithm>
#include <cmath>
#include <thread>

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

void adamwUpdateSegments(const std::vector<AdamWSegment> &segments, int64_t step, const AdamWHyper &h,
                         float gradScale, int threads) {
  int64_t total = 0;
  for (const AdamWSegment &s : segments) total += s.n;
  // Chunks of whole cache lines, at least 64 Ki elements each.
  int64_t chunk = std::max<int64_t>((total + threads - 1) / std::max(threads, 1), 1 << 16);
  chunk = (chunk + 15) / 16 * 16;
  auto range = [&](int64_t b, int64_t e) {
    int64_t at = 0;
    for (const AdamWSegment &s : segments) {
      int64_t lo = std::max(b, at), hi = std::min(e, at + s.n);
      if (lo < hi)
        adamwUpdate(s.param + (lo - at), s.grad + (lo - at), s.m + (lo - at), s.v + (lo - at), hi - lo, step, h,
                    s.decay, gradScale);
      at += s.n;
    }
  };
  std::vector<std::thread> workers;
  for (int64_t b = chunk; b < total; b += chunk) workers.emplace_back(range, b, std::min(total, b + chunk));
  range(0, std::min(total, chunk));
  for (std::thread &w : workers) w.join();
}

} // namespace megac::runtime
