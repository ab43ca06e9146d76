#include "runtime/train/TokenRowSets.h"

#include "runtime/plan/TokenRows.h"

#include <algorithm>

namespace megac::runtime {

std::vector<int32_t> earlyRowParameters(const plan::Plan &plan) {
  std::vector<int32_t> out;
  const std::vector<bool> early = plan::unitsSteppingUnreadRowsEarly(plan);
  for (int u = 0; u < plan.units_size(); ++u)
    if (early[size_t(u)])
      for (int32_t q : plan::unreadRowsParameters(plan, u)) out.push_back(q);
  return out;
}

std::shared_ptr<const StepTokenRows> stepTokenRows(const plan::Plan &plan, const std::vector<int32_t> &params,
                                                   const std::vector<std::pair<Tensor, Tensor>> &microBatches) {
  auto rows = std::make_shared<StepTokenRows>();
  for (int32_t q : params) {
    const int64_t n = plan::parameterRows(plan.parameters(q));
    std::vector<uint8_t> seen(size_t(std::max<int64_t>(n, 0)), 0);
    for (const auto &[tokens, targets] : microBatches)
      for (int64_t k = 0; k < tokens.numel(); ++k) {
        int64_t t = tokens.getAsInt(k);
        if (t < 0) t += n; // ONNX Gather: a negative index counts from the end
        if (t >= 0 && t < n) seen[size_t(t)] = 1;
      }
    std::vector<RowRun> &runs = rows->read[q];
    for (int64_t r = 0; r < n;) {
      if (!seen[size_t(r)]) {
        ++r;
        continue;
      }
      const int64_t begin = r;
      while (r < n && seen[size_t(r)]) ++r;
      runs.push_back({begin, r});
    }
  }
  return rows;
}

std::vector<RowRun> unreadRuns(const std::vector<RowRun> &read, int64_t rows) {
  std::vector<RowRun> out;
  int64_t at = 0;
  for (const RowRun &r : read) {
    if (r.begin > at) out.push_back({at, r.begin});
    at = std::max(at, r.end);
  }
  if (at < rows) out.push_back({at, rows});
  return out;
}

void appendRowSegments(std::vector<AdamWSegment> &out, const plan::Parameter &p, const std::vector<RowRun> &runs,
                       float *param, const float *grad, float *m, float *v, uint16_t *bf16) {
  const int64_t row = plan::parameterRowElements(p);
  for (const RowRun &r : runs) {
    const int64_t off = r.begin * row, n = (r.end - r.begin) * row;
    if (n <= 0) continue;
    out.push_back({param + off, grad ? grad + off : nullptr, m + off, v + off, n, p.decay(), bf16 ? bf16 + off : nullptr});
  }
}

} // namespace megac::runtime
