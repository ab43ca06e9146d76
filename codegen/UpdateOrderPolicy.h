#pragma once
// `--update-order auto` (the default): the order of the host's AdamW
// UPDATEs. The backward hands the host its units' gradients last unit first,
// and the next step's forward needs them first unit first; the host, slower
// than the backward, falls behind, so in arrival order the first units'
// updates are the last of the step and the next forward waits for all of it
// (the 8B shape at 8 x 2048, every unit streamed, H100: a 2.50 s step on a
// 1.98 s compute lane, its CPU lane 1.73 s). Updating first the unit whose
// gradients have come that the next forward needs first (the lowest unit
// index, after every unit sharing a parameter with it and coming later in
// the forward, whose sum it takes) lets the forward start with the first
// units while the host updates the later ones beside it. The gradients that
// wait hold their staging slot: more grad slots (GPU) and staging slots
// (pinned host memory), each the largest unit's gradients.
//
// The order comes from the cost model's prediction of the arrival-order
// plan (each UPDATE's duration, each gradient's arrival); then 2, 3, 4, 6,
// 8, 12 and 16 grad slots are tried, within 97% of the GPU budget and within
// --host-mem, and the fewest within 0.5% of the fastest is taken where it is
// predicted 1% faster than arrival order. Only where steps overlap (without,
// a step ends after its last update whatever the order).
#include "codegen/CostModel.h"
#include "codegen/StreamSchedule.h"

namespace megac::codegen {

// "auto" -> Auto, "arrival" -> Arrival.
llvm::Expected<UpdateOrder> parseUpdateOrder(llvm::StringRef s);

// The host-stepped units, the one the next forward needs first among those
// whose gradients have come (by `pred`, a prediction of `p` as it is) first.
std::vector<int> earliestNeededFirst(const plan::Plan &p, const plan::StepPrediction &pred);

// Sets o.hostUpdateOrder and o.gradSlots where auto's choice is not arrival
// order, and rebuilds the schedule; runs after the weight-slots policy.
llvm::Error applyUpdateOrderPolicy(plan::Plan &p, ScheduleOptions &o);

} // namespace megac::codegen
