#pragma once
// What a plan must fit (issue 4): the GPU budget (--gpu-mem) and the host
// memory (--host-mem). A plan over budget is a compile error with the
// numbers, not a crash at run time.
#include "runtime/plan/PlanIO.h"

#include <functional>

namespace megac::codegen {

// Host bytes of the plan: fp32 master weights, AdamW m and v, the step's
// gradients where kept (runtime/plan/HostBill.h), plus the pinned staging
// slots of the schedule.
// Errors, with the numbers, when the host bill exceeds `hostBudgetBytes`.
llvm::Error checkHostBudget(const plan::Plan &p, int64_t hostBudgetBytes);
// The same as a yes or no; yes where there is no budget (<= 0).
bool fitsHostBudget(const plan::Plan &p, int64_t hostBudgetBytes);

// The largest n in [1, below) with fits(n), by binary search (fits is taken
// to be monotone); 0 if none.
int64_t largestFitting(int64_t below, const std::function<bool(int64_t)> &fits);

// The device bytes of the same model compiled at (batch, seq).
using DeviceBytesAt = std::function<llvm::Expected<int64_t>(int64_t batch, int64_t seq)>;

// The longest seq below `below` that fits at the plan's batch, with a note
// on how (offload, slices), found by the caller's own search.
struct SeqThatFits {
  int64_t seq = 0; // 0: none
  std::string how;
};
using LongestSeqBelow = std::function<llvm::Expected<SeqThatFits>(int64_t below)>;

// The error for a plan whose device_bytes exceed its gpu_budget_bytes: the
// GPU bytes by region category, and the largest batch that fits at this seq
// and the largest seq that fits at this batch (by deviceBytesAt at each
// length tried, or by longestSeq where given).
llvm::Error overBudgetError(const plan::Plan &p, const DeviceBytesAt &deviceBytesAt,
                            const LongestSeqBelow &longestSeq = nullptr);

} // namespace megac::codegen
