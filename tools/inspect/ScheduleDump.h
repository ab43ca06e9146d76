#pragma once
// A textual dump of a plan's streaming schedule (`megac plan PLAN --schedule`):
// slot sizes, events, device regions and actions, one per line.
#include "runtime/plan/PlanIO.h"

#include "llvm/Support/raw_ostream.h"

namespace megac::plan {

// Errors if the plan has no schedule.
llvm::Error printSchedule(const Plan &p, llvm::raw_ostream &os);

} // namespace megac::plan
