#pragma once
// Host memory: what the machine can give (MemAvailable, and the cgroup's
// limit less its usage where one is set), checked against the plan's host
// bill (runtime/plan/HostBill.h) before any of it is allocated or pinned, so
// that a plan too large for the machine is a clear error, never the OOM
// killer taking the user's machine down.
#include "runtime/plan/HostBill.h"

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

// Refuses, with the bill's parts and what the machine has, a plan whose host
// bill is more than `mem` offers. `simulatedDeviceBytes`: the CPU stream
// executor's copy of the plan's GPU memory, billed beside the rest.
llvm::Error checkHostMemory(const plan::Plan &plan, const HostMemory &mem, int64_t simulatedDeviceBytes = 0);

} // namespace megac::runtime
