#include "runtime/cuda/OpTimer.h"

#include "runtime/cuda/CudaCheck.h"

#include "runtime/plan/PlanLabels.h"

#include <algorithm>

namespace megac::cuda {

OpTimer::~OpTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

llvm::Error OpTimer::begin(const std::string &label, cudaStream_t stream) {
  size_t pair = labels_.size();
  while (events_.size() < 2 * (pair + 1)) {
    cudaEvent_t e;
    MEGAC_CUDA_TRY(cudaEventCreate(&e));
    events_.push_back(e);
  }
  labels_.push_back(label);
  MEGAC_CUDA_TRY(cudaEventRecord(events_[2 * pair], stream));
  return llvm::Error::success();
}

llvm::Error OpTimer::end(cudaStream_t stream) {
  MEGAC_CUDA_TRY(cudaEventRecord(events_[2 * (labels_.size() - 1) + 1], stream));
  return llvm::Error::success();
}

llvm::Error OpTimer::collect() {
  for (size_t i = 0; i < labels_.size(); ++i) {
    float ms = 0;
    MEGAC_CUDA_TRY(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]));
    Total &t = totals_[labels_[i]];
    t.ms += double(ms);
    ++t.calls;
  }
  labels_.clear();
  return llvm::Error::success();
}

void OpTimer::print(llvm::raw_ostream &os, int64_t steps) const {
  const double per = double(std::max<int64_t>(steps, 1));
  std::vector<plan::OpTypeTime> rows;
  for (const auto &[label, t] : totals_) rows.push_back({label, int64_t(double(t.calls) / per), t.ms / per / 1e3});
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a.seconds > b.seconds; });
  plan::printOpTimes(os, "GPU time by op (" + std::to_string(steps) + " steps; the first pays for warm-up):", rows);
}

} // namespace megac::cuda
