// megac plan model.plan [--json]: a readable summary of a compiled plan
// (units, templates, parameters, memory and transfers).
#include "runtime/plan/PlanReport.h"
#include "tools/megac/Driver.h"

#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace megac::driver {

static cl::opt<std::string> PlanFile(cl::Positional, cl::desc("<model.plan>"), cl::Required, cl::sub(planCmd()));
static cl::opt<bool> Json("json", cl::desc("Print the summary as one JSON object"), cl::sub(planCmd()));

int runPlan() {
  auto p = plan::readPlan(PlanFile);
  if (!p) return reportError(p.takeError());
  auto report = plan::reportPlan(*p);
  if (!report) return reportError(report.takeError());
  if (Json) plan::printPlanReportJson(*p, *report, PlanFile, llvm::outs());
  else plan::printPlanReport(*p, *report, PlanFile, llvm::outs());
  return 0;
}

} // namespace megac::driver
