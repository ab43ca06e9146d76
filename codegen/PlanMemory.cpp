#include "codegen/PlanMemory.h"

#include "codegen/MemoryPlan.h"
#include "runtime/plan/UnitPrograms.h"

namespace megac::codegen {

llvm::Error assignArenas(plan::Plan &plan) {
  for (plan::Template &t : *plan.mutable_templates()) {
    std::vector<plan::Program *> programs = plan::mutableTemplatePrograms(t);
    for (size_t i = 0; i < programs.size(); ++i)
      if (auto e = plan::assignArena(*programs[i]))
        return llvm::createStringError(llvm::inconvertibleErrorCode(), "memory plan of template '" + t.name() + "' " +
                                                                           plan::programRoleName(int(i)) + ": " +
                                                                           llvm::toString(std::move(e)));
  }
  return llvm::Error::success();
}

} // namespace megac::codegen
