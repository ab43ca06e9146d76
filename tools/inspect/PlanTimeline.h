#pragma once
// `megac plan PLAN --html out.html`: the cost model's timeline of one step as
// one self-contained HTML page (inline CSS and SVG, no external resources):
// a lane each for H2D, compute, D2H and the CPU optimizer with one bar per
// schedule action, and the device memory in use over the step.
//
// Bars are <rect class="bar" data-action=I data-lane=LANE data-kind=KIND
// data-unit=NAME> inside <g class="lane" data-lane=LANE>, each with a <title>
// tooltip (times, bytes, flops). A small inline script, run by a browser,
// counts the bars that render with a positive size and writes the count to
// <body data-rendered-bars=N> (the headless-Chromium test reads it).
#include "tools/inspect/PlanReport.h"

#include "llvm/Support/raw_ostream.h"

namespace megac::plan {

// Fails when the report has no prediction (no schedule, or the cost model
// could not simulate it).
llvm::Error writePlanTimeline(const Plan &p, const PlanReport &r, const std::string &planPath, llvm::raw_ostream &os);

// `megac run --timeline out.html`: the same page for one micro-batch as the
// run measured it (measuredStep's `times`, one per schedule action; the
// profile prices each action's work for its tooltip), headed by `what`
// (which run and step) beside the predicted step time (r from reportPlan
// with the same profile).
llvm::Error writeMeasuredTimeline(const Plan &p, const PlanReport &r, const MachineProfile &profile,
                                  const std::vector<std::pair<double, double>> &times, const std::string &what,
                                  const std::string &planPath, llvm::raw_ostream &os);

} // namespace megac::plan
