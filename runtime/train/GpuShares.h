#pragma once
// A step over several GPUs (plan.proto's Plan.gpus): which of the step's
// micro-batches each GPU runs, and the fault injection that tests a GPU
// failing mid-step.
//
// GPU g runs micro-batches [g * M, (g + 1) * M) of the step's gpus * M, M
// the plan's grad_accum, and the host adds each unit's gradients to the
// step's sum as they land, GPU by GPU; the last GPU's last pass steps each
// parameter as its sum completes (after the whole step with --clip). The
// loss scales are the step's (each micro-batch's share of every GPU's
// counted targets), so this is one GPU running all gpus * M micro-batches
// with --grad-accum, bit for bit: the same additions in the same order.
#include <cstdint>
#include <optional>
#include <string>

namespace megac::runtime {

// MEGAC_INJECT_GPU_FAULT=GPU or GPU@STEP (default step 1): GPU number GPU
// fails at optimizer step STEP as its share starts, after the GPUs before it
// ran theirs (mid-step), as a device error would; the step stops before any
// of its updates. In a one-GPU plan, GPU 0 fails as the step starts (the
// last step's host AdamW, where steps overlap, is that step's and completes).
struct GpuFaultInjection {
  int gpu = 0;
  int64_t step = 1;
};
std::optional<GpuFaultInjection> gpuFaultInjectionFromEnvironment();

} // namespace megac::runtime
