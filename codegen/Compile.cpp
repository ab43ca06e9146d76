#include "codegen/Compile.h"

#include "codegen/Budget.h"
#include "codegen/RecomputePolicy.h"
#include "codegen/ResidentPolicy.h"
#include "runtime/plan/PlanChecker.h"

namespace megac::codegen {

// Everything but the budget checks and the plan checker.
static llvm::Expected<plan::Plan> compilePlan(const std::string &modelPath, const frontend::ImportOptions &import,
                                              const passes::PassOptions &passOpts, const CodegenOptions &co) {
  auto g = frontend::importOnnx(modelPath, import);
  if (!g) return g.takeError();
  std::vector<std::string> pipeline = passes::importPipeline();
  for (const std::string &p : passes::lossPipeline(passOpts)) pipeline.push_back(p);
  for (const char *p : {"partition-units", "verify"}) pipeline.push_back(p);
  if (auto e = passes::runPipeline(**g, pipeline, passOpts)) return std::move(e);
  CodegenOptions opts = co;
  opts.modelPath = modelPath;
  opts.ignoreIndex = passOpts.ignoreIndex;
  auto plan = buildPlan(**g, opts);
  if (!plan) return plan.takeError();
  if (auto e = plan::applyNoDecay(*plan)) return std::move(e);
  if (auto e = applyResidentPolicy(*plan, co.schedule)) return std::move(e);
  if (auto e = applyRecomputePolicy(*plan, co.schedule)) return std::move(e);
  return plan;
}

static frontend::ImportOptions atShape(frontend::ImportOptions io, int64_t batch, int64_t seq) {
  io.batch = batch;
  io.seq = seq;
  if (io.firstInputShape && io.firstInputShape->size() >= 2) {
    (*io.firstInputShape)[0] = batch;
    (*io.firstInputShape)[1] = seq;
  }
  return io;
}

llvm::Expected<plan::Plan> compileForTraining(const std::string &modelPath, const frontend::ImportOptions &import,
                                              const passes::PassOptions &passOpts, const CodegenOptions &co) {
  auto plan = compilePlan(modelPath, import, passOpts, co);
  if (!plan) return plan.takeError();
  if (plan->schedule().device_bytes() > plan->schedule().gpu_budget_bytes())
    return overBudgetError(*plan, [&](int64_t batch, int64_t seq) -> llvm::Expected<int64_t> {
      auto smaller = compilePlan(modelPath, atShape(import, batch, seq), passOpts, co);
      if (!smaller) return smaller.takeError();
      return smaller->schedule().device_bytes();
    });
  if (co.schedule.hostBudgetBytes > 0)
    if (auto e = checkHostBudget(*plan, co.schedule.hostBudgetBytes)) return std::move(e);
  if (auto e = plan::checkPlan(*plan))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "internal error: the compiled plan fails the plan checker: " +
                                       llvm::toString(std::move(e)));
  return plan;
}

} // namespace megac::codegen
