#pragma once
// GPU time by op type (`megac run --op-profile`): a pair of CUDA events
// around each kernel launch, read back once the step's streams are idle.
// Events between kernels cost a little; the op profile is for finding where
// the time goes, not for the step time itself.
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cuda_runtime.h>

#include <map>
#include <string>
#include <vector>

namespace megac::cuda {

class OpTimer {
public:
  OpTimer() = default;
  OpTimer(const OpTimer &) = delete;
  OpTimer &operator=(const OpTimer &) = delete;
  ~OpTimer();

  // Brackets one op on `stream`: begin, launch, end.
  llvm::Error begin(const std::string &label, cudaStream_t stream);
  llvm::Error end(cudaStream_t stream);
  // Adds the bracketed times to the totals; the streams must be idle.
  llvm::Error collect();
  // The table: label, launches, ms per step, share of the timed total.
  void print(llvm::raw_ostream &os, int64_t steps) const;

private:
  struct Total {
    double ms = 0;
    int64_t calls = 0;
  };
  std::vector<cudaEvent_t> events_; // start/end pairs, reused each collect
  std::vector<std::string> labels_; // one per pair in use
  std::map<std::string, Total> totals_;
};

} // namespace megac::cuda
