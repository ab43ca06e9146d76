#include "runtime/train/Schedule.h"

#include <cmath>

namespace megac::runtime {

float learningRate(const plan::Optimizer &o, int64_t step, int64_t totalSteps) {
  double lr = o.lr();
  if (o.warmup() > 0 && step <= o.warmup()) return float(lr * double(step) / double(o.warmup()));
  if (o.schedule() == "cosine") {
    int64_t decaySteps = std::max<int64_t>(totalSteps - o.warmup(), 1);
    double progress = std::min(1.0, double(step - o.warmup()) / double(decaySteps));
    return float(o.min_lr() + 0.5 * (lr - o.min_lr()) * (1.0 + std::cos(M_PI * progress)));
  }
  return float(lr);
}

} // namespace megac::runtime
