#pragma once
// Host memory: what the machine can give (MemAvailable, and the cgroup's
// limit less its usage where one is set), checked against the plan's host
// bill before any of it is allocated or pinned, so that a plan too large
// for the machine is a clear error, never the OOM killer taking the user's
// machine down.
#include "plan.pb.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace megac::runtime {

struct HostMemory {
  int64_t memAvailable = -1; // /proc/meminfo MemAvailable, bytes (-1: unknown)
  int64_t cgroupLeft = -1;   // the cgroup's memory limit less its usage (-1: no limit)
  // The smaller of the two that are known, or -1.
  int64_t available() const;
};

HostMemory readHostMemory();

// The host bytes the plan's run allocates: fp32 master weights, AdamW m and
// v, the step's gradients where it keeps them, the pinned staging, the
// offloaded checkpoints, and on the CPU stream executor the plan's GPU
// memory, simulated in host memory.
struct HostBill {
  int64_t masterWeights = 0, adamMoments = 0, gradients = 0, pinnedStaging = 0, pinnedCheckpoints = 0, simulatedDevice = 0;
  // Saturating: an unchecked plan's sizes may be anything (the bill is read before the checker runs).
  int64_t total() const {
    int64_t t = 0;
    for (int64_t part : {masterWeights, adamMoments, gradients, pinnedStaging, pinnedCheckpoints, simulatedDevice})
      if (__builtin_add_overflow(t, part, &t)) return INT64_MAX;
    return t;
  }
};
llvm::Expected<HostBill> hostBill(const plan::Plan &plan);

// Refuses, with the bill's parts and what the machine has, a plan whose host
// bill is more than `mem` offers. `simulatedDeviceBytes`: the CPU stream
// executor's copy of the plan's GPU memory, billed beside the rest.
llvm::Error checkHostMemory(const plan::Plan &plan, const HostMemory &mem, int64_t simulatedDeviceBytes = 0);

} // namespace megac::runtime
