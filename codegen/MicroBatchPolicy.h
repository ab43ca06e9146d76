#pragma once
// `--micro-batches-per-pass N|auto` (layer-major accumulation, issue 23): a
// step of --grad-accum micro-batches runs in passes of N, each carrying its
// N micro-batches through every unit, so that a unit streams in once per
// pass and its gradients leave once, summed on the GPU. Auto: the most
// micro-batches per pass (a divisor of --grad-accum) whose plan fits the GPU
// budget: each micro-batch of a pass keeps its own layer-boundary
// checkpoints, activation gradients and data on the GPU.
#include "codegen/StreamSchedule.h"

namespace megac::codegen {

// "auto" -> -1, else N >= 1.
llvm::Expected<int> parseMicroBatchesPerPass(llvm::StringRef s);

// Sets o.microBatches (a given N must divide the plan's grad_accum) and
// builds the schedule with it. Runs before the resident policy's auto (which
// fills what GPU memory is left), after an explicit --resident-units.
llvm::Error applyMicroBatchPolicy(plan::Plan &p, ScheduleOptions &o);

} // namespace megac::codegen
