#include "codegen/WeightStreamPolicy.h"

#include "codegen/Budget.h"
#include "codegen/UpdateOrderPolicy.h"

namespace megac::codegen {

llvm::Error applyWeightStreamPolicy(plan::Plan &p, ScheduleOptions &o, const ScheduleOptions &beforeOrder) {
  if (!o.bf16WeightStreamAuto || o.bf16WeightStream || p.compute() != "bf16") return llvm::Error::success();
  plan::Plan alt = p;
  ScheduleOptions a = beforeOrder;
  a.bf16WeightStream = true;
  if (auto e = buildStreamSchedule(alt, a)) return e;
  bool any = false;
  for (const plan::Parameter &q : alt.parameters()) any |= q.streams_bf16();
  if (!any) return llvm::Error::success();
  if (auto e = applyUpdateOrderPolicy(alt, a)) return e;
  const int64_t host = o.hostBudgetBytes > 0 ? o.hostBudgetBytes : o.autoHostBudgetBytes;
  if (alt.schedule().device_bytes() > o.gpuBudgetBytes / 100 * 97 || !fitsHostBudget(alt, host))
    return llvm::Error::success();
  auto without = plan::predictStep(p, o.profile), with = plan::predictStep(alt, o.profile);
  if (!without) return without.takeError();
  if (!with) return with.takeError();
  if (with->stepSeconds > without->stepSeconds * 0.99) return llvm::Error::success();
  p = std::move(alt);
  o = a;
  return llvm::Error::success();
}

} // namespace megac::codegen
