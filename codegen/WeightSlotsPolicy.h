#pragma once
// `--weight-slots auto` (the default): 2 weight slots, or where streamed
// units step their AdamW on the GPU, the fewest of 2, 3 and 4 whose step the
// cost model predicts within 0.5% of the fastest that fits 97% of the GPU
// budget (codegen/CountPolicy.h). A GPU-stepped unit frees its weight slot
// only once its WRITEBACK (weights and both moments) is done, so with 2 slots
// the backward's PREFETCH of each unit waits for the WRITEBACK of the unit
// two ahead; a third slot takes that chain off (2.8B, 8 units on the GPU,
// H100: 0.980 -> 0.965 s/step, 2026-12-05).
#include "codegen/StreamSchedule.h"

namespace megac::codegen {

// "auto" -> -1, else K >= 2.
llvm::Expected<int> parseWeightSlots(llvm::StringRef s);

// `--weight-slots auto`: runs after the GPU-AdamW policy (whose choice it
// needs; the policies before it plan with o.weightSlots = 2) and before the
// recompute policy, which then plans with the slots chosen. Sets
// o.weightSlots and, where it is not 2, rebuilds the schedule.
llvm::Error applyWeightSlotsPolicy(plan::Plan &p, ScheduleOptions &o);

} // namespace megac::codegen
