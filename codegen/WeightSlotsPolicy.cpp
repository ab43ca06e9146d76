#include "codegen/WeightSlotsPolicy.h"

#include "codegen/CountPolicy.h"
#include "runtime/plan/StreamLayout.h"

namespace megac::codegen {

llvm::Expected<int> parseWeightSlots(llvm::StringRef s) {
  if (s == "auto") return -1;
  int k = 0;
  if (s.getAsInteger(10, k) || k < 2)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--weight-slots must be auto or at least 2 (one slot computes while the next "
                                   "fills), got '" + s + "'");
  return k;
}

llvm::Error applyWeightSlotsPolicy(plan::Plan &p, ScheduleOptions &o) {
  if (!plan::anyAdamwOnGpu(p)) return llvm::Error::success(); // the schedule as built, with 2 slots
  // Counts 0..2 over 2, 3 and 4 slots; o is rebuilt with each.
  auto extra = fewestNearFastest(p, o, 2, [&](int n) { o.weightSlots = 2 + n; });
  if (!extra) return extra.takeError();
  o.weightSlots = 2 + *extra;
  return buildStreamSchedule(p, o);
}

} // namespace megac::codegen
