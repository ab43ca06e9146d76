#include "codegen/CheckpointOffloadPolicy.h"

#include "codegen/CountPolicy.h"

#include <climits>

namespace megac::codegen {

llvm::Expected<int> parseOffloadCheckpoints(llvm::StringRef s) {
  if (s == "all") return INT_MAX;
  return parseCountOrAuto("--offload-checkpoints", s);
}

llvm::Error applyCheckpointOffloadPolicy(plan::Plan &p, ScheduleOptions &o) {
  if (o.offloadCheckpoints >= 0) return buildStreamSchedule(p, o);
  o.offloadCheckpoints = 0;
  if (auto e = buildStreamSchedule(p, o)) return e;
  if (p.schedule().device_bytes() <= o.gpuBudgetBytes) return llvm::Error::success();
  for (int n = 1; n <= p.units_size(); ++n) {
    o.offloadCheckpoints = n;
    if (auto e = buildStreamSchedule(p, o)) return e;
    if (p.schedule().device_bytes() <= o.gpuBudgetBytes) return llvm::Error::success();
  }
  return llvm::Error::success();
}

} // namespace megac::codegen
