#pragma once
// The resident-unit policy: which units keep their fp32 weights and AdamW
// moments on the GPU for the whole run and step there (Unit.resident), instead
// of streaming their weights in and their gradients out every step.
//
// Backward runs the units in reverse, so the first units' gradients arrive
// last, and the next step's forward needs exactly those units first: their
// host AdamW (and the copies around it) is a tail the GPU waits for. Resident
// units take it off the critical path at 12 bytes of GPU memory per parameter
// (weights and moments) and no PCIe traffic. The policy takes units in
// forward order; units that share a parameter with another (tied weights sum
// their gradients on the host) or have none are not candidates.
#include "codegen/StreamSchedule.h"

namespace megac::codegen {

// "auto" -> -1, else a count >= 0.
llvm::Expected<int> parseResidentUnits(llvm::StringRef s);

// The units that may be resident (plan::canBeResident), in forward order.
std::vector<int> residentCandidates(const plan::Plan &p);

// Sets Unit.resident on the first o.residentUnits candidates and builds the
// schedule. Auto (-1): the fewest units whose step the cost model predicts
// within 0.5% of the fastest count that keeps the plan within 97% of the GPU
// budget. (A unit more costs GPU memory only: where the host's AdamW sets
// the pace, each one takes its share off the step, Llama-3.1-8B at batch 8 x
// 2048 went from 2.80 to 2.16 s/step with 32 of 34; where compute does, it
// changes little, the 2.8B bench measured 0.886 s/step with 3 and 0.892 with
// 21.) None resident where the step keeps its gradients (--clip,
// --grad-accum), whose AdamW waits for the whole step. A count over the
// candidates is an error naming the units that cannot be resident.
llvm::Error applyResidentPolicy(plan::Plan &p, const ScheduleOptions &o);

} // namespace megac::codegen
