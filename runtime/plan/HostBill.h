#pragma once
// The host bytes a plan's run allocates, read off the plan alone: codegen's
// host budget plans against it (codegen/Budget.cpp), the runtime checks it
// against the machine before allocating anything (runtime/train/HostMemory.h),
// and the report prints it (tools/inspect/PlanReport.h).
#include "runtime/plan/PlanIO.h"

#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>

namespace megac::plan {

// fp32 master weights, AdamW m and v, the step's gradients where it keeps
// them, the pinned staging, the offloaded checkpoints, the bf16 copies of the
// weights that stream as bf16 (pinned), and on the CPU stream
// executor the plan's GPU memory, simulated in host memory (the runtime's
// part: 0 here).
struct HostBill {
  int64_t masterWeights = 0, adamMoments = 0, gradients = 0, pinnedStaging = 0, pinnedCheckpoints = 0, bf16Weights = 0,
          simulatedDevice = 0;
  // Every part with what a user calls it.
  struct Part {
    const char *name;
    int64_t bytes;
  };
  std::array<Part, 7> parts() const {
    return {{{"fp32 master weights", masterWeights},
             {"AdamW moments", adamMoments},
             {"step gradients", gradients},
             {"gradient staging", pinnedStaging},
             {"offloaded checkpoints", pinnedCheckpoints},
             {"bf16 weights to stream", bf16Weights},
             {"the simulated GPU memory", simulatedDevice}}};
  }
  // Saturating: an unchecked plan's sizes may be anything (the bill is read before the checker runs).
  int64_t total() const {
    int64_t t = 0;
    for (const Part &part : parts())
      if (__builtin_add_overflow(t, part.bytes, &t)) return INT64_MAX;
    return t;
  }
};

// Fails on a unit's template, activation or parameter id, or a transfer
// action's unit, that does not exist (the plan may not be checked yet).
llvm::Expected<HostBill> hostBill(const Plan &plan);

} // namespace megac::plan
