#include "runtime/cuda/OpTimer.h"

#include "runtime/cuda/CudaCheck.h"

#include "llvm/Support/Format.h"

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
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a.second.ms > b.second.ms; });
  double all = 0;
  for (const auto &r : rows) all += r.second.ms;
  const double per = double(std::max<int64_t>(steps, 1));
  os << "GPU time by op (" << steps << " steps; the first pays for warm-up):\n";
  os << "  op                                       launches  ms per step   share\n";
  for (const auto &[label, t] : rows)
    os << llvm::format("  %-40s %8lld %12.3f %6.1f%%\n", label.c_str(), (long long)(double(t.calls) / per),
                       t.ms / per, all > 0 ? 100.0 * t.ms / all : 0.0);
  os << "  total" << llvm::format("%56.3f\n", all / per);
}

} // namespace megac::cuda
