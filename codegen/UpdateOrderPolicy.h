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

// The slot counts the plan fits (2, 3, 4, 6, 8, 12, 16 grad slots, within
// 97% of the GPU budget and within --host-mem) and the order above, from the
// prediction of the arrival-order plan with the most of them. Empty where
// none fits. Leaves `p` built with those slots in arrival order.
struct GreedyUpdateOrder {
  std::vector<int> order;
  std::vector<int> slotCounts;
};
llvm::Expected<GreedyUpdateOrder> greedyUpdateOrder(plan::Plan &p, const ScheduleOptions &o);

// The greedy order above never leaves the host idle: a unit whose gradients
// came just before the backward's last ones (the first units', which the
// next forward needs first) is updated as they come in, and they wait for it
// (the 8B at 8 x 2048, H100: the host was still on layers 6 and 5 when the
// gradients of layers 3 to 0 and the embedding came, and the next forward
// began 0.19 s after the backward ended). A unit the next forward needs later
// can wait until after the first unit's update instead. Each of the
// kDeferWindow units the order updates just before the lowest-index unit is
// tried there (in the deferred tail, in unit order); the move the cost model
// predicts shortest is kept where it gains kDeferMinGain, and again, up to
// kDeferRounds times.
inline constexpr int kDeferWindow = 8;
inline constexpr int kDeferRounds = 6;
inline constexpr double kDeferMinGain = 0.002;

// `order` with the unit at position `at` (before `first`) moved after
// position `first`, among the units after it in ascending unit order.
std::vector<int> deferredPast(const std::vector<int> &order, size_t at, size_t first);

// The local search above, from `order` (predicted `seconds`), built and
// predicted with `tried`'s other options.
llvm::Expected<std::vector<int>> deferNearTheBoundary(plan::Plan &p, ScheduleOptions tried, std::vector<int> order,
                                                      double seconds, const plan::MachineProfile &profile);

// Sets o.hostUpdateOrder and o.gradSlots where auto's choice is not arrival
// order, and rebuilds the schedule; runs after the weight-slots policy.
llvm::Error applyUpdateOrderPolicy(plan::Plan &p, ScheduleOptions &o);

} // namespace megac::codegen
