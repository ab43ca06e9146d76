#pragma once
// The recompute policy (issue 4): which units keep their activations from
// forward to backward (Unit.keep_activations) and which recompute their
// forward from the input checkpoint, so that the step fits the GPU budget
// with the least recompute. It builds the plan's streaming schedule.
#include "codegen/StreamSchedule.h"

namespace megac::codegen {

llvm::Expected<Recompute> parseRecompute(llvm::StringRef s);

// Decides keep_activations for every unit, drops the keep programs of
// templates no unit keeps, and fills plan.schedule (buildStreamSchedule).
// Auto: units are ranked by the forward time the cost model's rates give them
// per saved byte (ties: later units first, their saved values live the
// shortest); the longest prefix of that ranking is kept whose plan stays
// within 97% of the GPU budget (the rest is headroom for the CUDA context and
// libraries), then each later unit that still fits on its own. A plan over
// budget without any keeping stays over budget; the caller reports it.
llvm::Error applyRecomputePolicy(plan::Plan &p, const ScheduleOptions &o);

} // namespace megac::codegen
