#include "codegen/PlanMemory.h"

#include "runtime/plan/MemoryPlan.h"

namespace megac::codegen {

llvm::Error assignArenas(plan::Plan &plan) {
  for (plan::Template &t : *plan.mutable_templates())
    for (bool fwd : {true, false})
      if (auto e = plan::assignArena(fwd ? *t.mutable_forward() : *t.mutable_backward()))
        return llvm::createStringError(llvm::inconvertibleErrorCode(), "memory plan of template '" + t.name() + "' " +
                                                                           (fwd ? "forward" : "backward") + ": " +
                                                                           llvm::toString(std::move(e)));
  return llvm::Error::success();
}

} // namespace megac::codegen
