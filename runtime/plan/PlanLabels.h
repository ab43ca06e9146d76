#pragma once
// The names a plan's readers print, so that the compiler's reports and the
// runtimes' measurements label the same things the same way: device region
// kinds, and GPU time by op type (`megac plan --ops` predicts it, `megac run
// --op-profile` measures it in runtime/cuda/OpTimer).
#include "runtime/plan/PlanIO.h"

#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace megac::plan {

// "weight slots", "grad slots", "checkpoints", "activation grads", "arena",
// "workspace", "data", "constants".
const char *deviceCategoryName(DeviceRegion::Kind k);

// The GPU time one step spends in one op type, labelled the op type, with
// " (backward)" for the ops of backward programs (which recompute the
// forward).
struct OpTypeTime {
  std::string label;
  int64_t launches = 0; // per step
  double seconds = 0;   // per step
};

// GPU time by op type as `megac plan --ops` (predicted) and `megac run
// --op-profile` (measured) print it: `heading`, then one line per row in the
// order given (label, launches, ms per step, share of the total), then the total.
void printOpTimes(llvm::raw_ostream &os, llvm::StringRef heading, const std::vector<OpTypeTime> &rows);

} // namespace megac::plan
