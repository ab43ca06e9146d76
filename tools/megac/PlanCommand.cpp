// megac plan model.plan [--json]: a readable summary of a compiled plan
// (units, templates, parameters, memory and transfers).
// megac plan model.plan --schedule: the streaming schedule, one line each.
// --profile FILE: the machine the cost model predicts for (default: the
// built-in H200); --html out.html: the predicted timeline as a page;
// --ops: the predicted GPU time by op type, beside which `megac run
// --op-profile` prints the measured one.
#include "codegen/CostModel.h"
#include "runtime/plan/PlanLabels.h"
#include "tools/inspect/PlanReport.h"
#include "tools/inspect/PlanTimeline.h"
#include "tools/inspect/ScheduleDump.h"
#include "tools/megac/Driver.h"

#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace megac::driver {

static cl::opt<std::string> PlanFile(cl::Positional, cl::desc("<model.plan>"), cl::Required, cl::sub(planCmd()));
static cl::opt<bool> Json("json", cl::desc("Print the summary as one JSON object"), cl::sub(planCmd()));
static cl::opt<bool> ShowSchedule("schedule", cl::desc("Print the streaming schedule: regions and actions"),
                                  cl::sub(planCmd()));
static cl::opt<std::string> PlanProfile("profile",
                                        cl::desc("Machine profile for the cost model (default: the built-in H200 "
                                                 "profile, bench/h200.profile)"),
                                        cl::value_desc("file"), cl::sub(planCmd()));
static cl::opt<std::string> HtmlOut("html", cl::desc("Write the predicted timeline of one step as an HTML page"),
                                    cl::value_desc("file"), cl::sub(planCmd()));
static cl::opt<bool> ShowOps("ops",
                             cl::desc("Print the cost model's GPU time by op type per step (labelled as "
                                      "`megac run --op-profile` labels the measured times)"),
                             cl::sub(planCmd()));

static int printOpTimes(const plan::Plan &p, const plan::MachineProfile &profile) {
  auto ops = plan::predictOpTimes(p, profile);
  if (!ops) return reportError(ops.takeError());
  plan::printOpTimes(llvm::outs(), "predicted GPU time by op (one step, each op alone; " + profile.description + "):",
                     *ops);
  return 0;
}

int runPlan() {
  auto p = plan::readPlan(PlanFile);
  if (!p) return reportError(p.takeError());
  if (ShowSchedule) {
    if (auto e = plan::printSchedule(*p, llvm::outs())) return reportError(std::move(e));
    return 0;
  }
  plan::MachineProfile profile;
  if (!PlanProfile.empty()) {
    auto read = plan::readMachineProfile(PlanProfile);
    if (!read) return reportError(read.takeError());
    profile = *read;
  }
  if (ShowOps) return printOpTimes(*p, profile);
  auto report = plan::reportPlan(*p, profile);
  if (!report) return reportError(report.takeError());
  if (!HtmlOut.empty())
    if (auto e = writeTextFile(HtmlOut, [&](llvm::raw_ostream &os) { return plan::writePlanTimeline(*p, *report, PlanFile, os); }))
      return reportError(std::move(e));
  if (Json) plan::printPlanReportJson(*p, *report, PlanFile, llvm::outs());
  else plan::printPlanReport(*p, *report, PlanFile, llvm::outs());
  return 0;
}

} // namespace megac::driver
