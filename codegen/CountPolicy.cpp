#include "codegen/CountPolicy.h"

#include "codegen/CostModel.h"

#include <algorithm>

namespace megac::codegen {

llvm::Expected<int> parseCountOrAuto(llvm::StringRef flag, llvm::StringRef s) {
  if (s == "auto") return -1;
  int n = 0;
  if (s.getAsInteger(10, n) || n < 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   flag + " must be auto or a count >= 0, got '" + s + "'");
  return n;
}

llvm::Expected<int> fewestNearFastest(plan::Plan &p, const ScheduleOptions &o, int most,
                                      llvm::function_ref<void(int)> setCount) {
  const int64_t limit = o.gpuBudgetBytes / 100 * 97;
  std::vector<double> predicted; // by count, while the plan fits
  for (int n = 0; n <= most; ++n) {
    setCount(n);
    if (auto e = buildStreamSchedule(p, o)) return std::move(e);
    if (p.schedule().device_bytes() > limit) break;
    auto pred = plan::predictStep(p, o.profile);
    if (!pred) return pred.takeError();
    predicted.push_back(pred->stepSeconds);
  }
  return fewestWithinHalfPercent(predicted);
}

int fewestWithinHalfPercent(const std::vector<double> &byCount) {
  int best = 0;
  if (!byCount.empty()) {
    const double fastest = *std::min_element(byCount.begin(), byCount.end());
    while (best + 1 < int(byCount.size()) && byCount[size_t(best)] > fastest * 1.005) ++best;
  }
  return best;
}

} // namespace megac::codegen
