#pragma once
// Learning-rate schedules: linear warmup, then constant or cosine decay to
// min_lr at the last step.
#include "plan.pb.h"

namespace megac::runtime {

// The learning rate of step `step` (1-based) of `totalSteps`.
float learningRate(const plan::Optimizer &o, int64_t step, int64_t totalSteps);

} // namespace megac::runtime
