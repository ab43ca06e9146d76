#pragma once
// The rows of each token-indexed table (runtime/plan/TokenRows.h) that one
// step's tokens read, and the host AdamW over a table's rows: the early
// UPDATE_UNREAD_ROWS steps the others with a zero gradient, the UPDATE after
// the backward the rows read. Both runtimes use these.
#include "runtime/core/Tensor.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/train/AdamW.h"

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace megac::runtime {

// Rows [begin, end) of a table.
struct RowRun {
  int64_t begin = 0, end = 0;
};

struct StepTokenRows {
  // Per parameter stepped early: the runs of rows the step's tokens read,
  // ascending and apart.
  std::map<int32_t, std::vector<RowRun>> read;
  const std::vector<RowRun> *readOf(int32_t param) const {
    auto it = read.find(param);
    return it == read.end() ? nullptr : &it->second;
  }
};

// The parameters of the plan whose unread rows step early: those of every
// unit whose schedule has an UPDATE_UNREAD_ROWS (none without a schedule).
std::vector<int32_t> earlyRowParameters(const plan::Plan &plan);

// The rows the tokens of `microBatches` (the step's (tokens, targets) pairs)
// read of each of `params`; a token outside a table's rows reads none of it
// (the Gather refuses it).
std::shared_ptr<const StepTokenRows> stepTokenRows(const plan::Plan &plan, const std::vector<int32_t> &params,
                                                   const std::vector<std::pair<Tensor, Tensor>> &microBatches);

// The runs of [0, rows) that `read` does not cover.
std::vector<RowRun> unreadRuns(const std::vector<RowRun> &read, int64_t rows);

// AdamW segments of parameter `p` (its host arrays at param, m, v and its
// bf16 copy, where given) over `runs` of its rows: from `grad` (the whole
// parameter's gradient, in the same layout), or with a zero gradient where
// `grad` is null.
void appendRowSegments(std::vector<AdamWSegment> &out, const plan::Parameter &p, const std::vector<RowRun> &runs,
                       float *param, const float *grad, float *m, float *v, uint16_t *bf16);

} // namespace megac::runtime
