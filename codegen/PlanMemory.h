#pragma once
// Lifetimes and offsets (issue 4): the arena of every template's forward and
// backward program (codegen/MemoryPlan.h; the rules are runtime/plan/ArenaRules.h).
#include "runtime/plan/PlanIO.h"

namespace megac::codegen {

// Fills Program.arena_offsets / arena_bytes of every template's programs.
llvm::Error assignArenas(plan::Plan &plan);

} // namespace megac::codegen
