#include "codegen/GpuAdamwPolicy.h"

#include "codegen/CountPolicy.h"
#include "codegen/CostModel.h"
#include "runtime/plan/StreamLayout.h"

#include <algorithm>
#include <limits>
#include <optional>

namespace megac::codegen {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

llvm::Expected<int> parseGpuAdamwUnits(llvm::StringRef s) { return parseCountOrAuto("--gpu-adamw-units", s); }

std::vector<int> gpuAdamwCandidates(const plan::Plan &p) {
  std::vector<int> units;
  for (int u = 0; u < p.units_size(); ++u)
    if (!p.units(u).resident() && plan::canBeResident(p, u)) units.push_back(u);
  return units;
}

llvm::Error applyGpuAdamwPolicy(plan::Plan &p, const ScheduleOptions &o, FinishPlan finish) {
  const std::vector<int> candidates = gpuAdamwCandidates(p);
  const int most = int(candidates.size());
  // The n candidates from position `from` on.
  auto setOnGpu = [&](plan::Plan &q, int from, int n) {
    for (plan::Unit &u : *q.mutable_units()) u.set_adamw_on_gpu(false);
    for (int i = from; i < from + n; ++i) q.mutable_units(candidates[size_t(i)])->set_adamw_on_gpu(true);
  };
  if (o.gpuAdamwUnits > most)
    return err("--gpu-adamw-units " + llvm::Twine(o.gpuAdamwUnits) + ": " + llvm::Twine(most) + " of the plan's " +
               llvm::Twine(p.units_size()) +
               " units can step on the GPU while they stream (not resident, no parameter shared with another unit)");
  if (o.gpuAdamwUnits >= 0) {
    setOnGpu(p, 0, o.gpuAdamwUnits);
    return buildStreamSchedule(p, o);
  }
  int bestFrom = 0, best = 0;
  if (!plan::stepKeepsGradients(p) && most > 0) {
    const int64_t limit = o.gpuBudgetBytes / 100 * 97;
    // The step of n candidates from `from` on, as the later policies finish
    // the plan; nullopt where it does not fit the GPU budget.
    auto predicted = [&](int from, int n) -> llvm::Expected<std::optional<double>> {
      plan::Plan q = p;
      ScheduleOptions qo = o;
      setOnGpu(q, from, n);
      if (auto e = buildStreamSchedule(q, qo)) return std::move(e);
      if (auto e = finish(q, qo)) return std::move(e);
      if (q.schedule().device_bytes() > limit) return std::nullopt;
      auto pred = plan::predictStep(q, o.profile);
      if (!pred) return pred.takeError();
      return pred->stepSeconds;
    };
    auto none = predicted(0, 0);
    if (!none) return none.takeError();
    double bestSeconds = none->value_or(std::numeric_limits<double>::infinity());
    // From the first candidate, and from the second: the first is often the
    // embedding, the largest unit (a Llama-3 vocabulary: 525M parameters),
    // whose moments over PCIe may cost more than its host AdamW.
    for (int from = 0; from < std::min(2, most); ++from) {
      std::vector<double> byCount{*none ? **none : std::numeric_limits<double>::infinity()};
      for (int n = 1; n <= most - from; ++n) {
        auto t = predicted(from, n);
        if (!t) return t.takeError();
        if (!*t) break; // more do not fit either
        byCount.push_back(**t);
      }
      const int n = fewestWithinHalfPercent(byCount);
      if (n > 0 && byCount[size_t(n)] < bestSeconds * (1 - kGpuAdamwMinGain)) bestFrom = from, best = n, bestSeconds = byCount[size_t(n)];
    }
  }
  setOnGpu(p, bestFrom, best);
  return buildStreamSchedule(p, o);
}

} // namespace megac::codegen
