#pragma once
// `--bf16-weight-stream auto`: whether the weights that only matrix products
// read stream as bf16 (runtime/plan/Bf16Weights.h). It halves those
// PREFETCHes' bytes, and costs 2 bytes of pinned host memory a parameter,
// the weight copies' GPU memory (half a weight slot each) and 2 more bytes
// of the host AdamW's traffic. Where host memory is short the copies take
// the room of grad and staging slots that the update order needs (the 8B on
// a 128 GiB host: 6 slots instead of 12), and the host's AdamW may bound the
// step instead of the H2D lane. So the plan with it is built as the one
// without was (the same weight slots, then the update-order policy with the
// flag on) and kept where the cost model predicts it 1% faster within the
// GPU budget and --host-mem (where not given, the compiling machine's
// available memory: ScheduleOptions.autoHostBudgetBytes).
#include "codegen/CostModel.h"
#include "codegen/StreamSchedule.h"

namespace megac::codegen {

// `beforeOrder`: the schedule options the update-order policy started from.
// Runs right after that policy; sets o.bf16WeightStream (and the update
// order and grad slots chosen with it) where auto takes it.
llvm::Error applyWeightStreamPolicy(plan::Plan &p, ScheduleOptions &o, const ScheduleOptions &beforeOrder);

} // namespace megac::codegen
