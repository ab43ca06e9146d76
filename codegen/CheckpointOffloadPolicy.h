#pragma once
// The checkpoint-offload policy (issue 24): which units' boundary
// checkpoints go to pinned host memory after their forward and come back
// before their backward (plan.proto's StreamSchedule.pinned_checkpoint_bytes).
//
// Every checkpoint is live at once between the forward and the backward, so
// at long context they are most of the GPU's memory (the 2.8B bench model at
// 262,144 tokens: 26 x 3.2 GB). The first units' are offloaded first: they
// wait longest on the GPU, and their copies back have the whole backward to
// hide behind. The last units' are never offloaded: they are read again
// right after they are written.
#include "codegen/StreamSchedule.h"

namespace megac::codegen {

// "auto" -> -1, "all" -> every unit, else a count >= 0 of units.
llvm::Expected<int> parseOffloadCheckpoints(llvm::StringRef s);

// Builds the schedule with o.offloadCheckpoints. Auto (-1): none where the
// plan fits the GPU budget, else the fewest units whose offload makes it
// fit (all where none does: compile then reports the plan over budget).
// Leaves o.offloadCheckpoints at the count chosen.
llvm::Error applyCheckpointOffloadPolicy(plan::Plan &p, ScheduleOptions &o);

} // namespace megac::codegen
