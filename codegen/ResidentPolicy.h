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

// The units that may be resident, in forward order: those with parameters,
// none of them shared with another unit.
std::vector<int> residentCandidates(const plan::Plan &p);

// Sets Unit.resident on the first o.residentUnits candidates and builds the
// schedule. Auto (-1): the count that the cost model predicts the shortest
// step for (a unit more must shorten it by 0.5%) while the plan stays within
// 97% of the GPU budget; none where the step keeps its gradients (--clip,
// --grad-accum), whose AdamW waits for the whole step. A count over the
// candidates is an error naming the units that cannot be resident.
llvm::Error applyResidentPolicy(plan::Plan &p, const ScheduleOptions &o);

} // namespace megac::codegen
