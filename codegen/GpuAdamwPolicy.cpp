#include "codegen/GpuAdamwPolicy.h"

#include "codegen/CountPolicy.h"
#include "runtime/plan/StreamLayout.h"

#include <algorithm>

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

llvm::Error applyGpuAdamwPolicy(plan::Plan &p, const ScheduleOptions &o) {
  const std::vector<int> candidates = gpuAdamwCandidates(p);
  const int most = int(candidates.size());
  auto setOnGpu = [&](int n) {
    for (plan::Unit &u : *p.mutable_units()) u.set_adamw_on_gpu(false);
    for (int i = 0; i < n; ++i) p.mutable_units(candidates[size_t(i)])->set_adamw_on_gpu(true);
  };
  if (o.gpuAdamwUnits > most)
    return err("--gpu-adamw-units " + llvm::Twine(o.gpuAdamwUnits) + ": " + llvm::Twine(most) + " of the plan's " +
               llvm::Twine(p.units_size()) +
               " units can step on the GPU while they stream (not resident, no parameter shared with another unit)");
  if (o.gpuAdamwUnits >= 0) {
    setOnGpu(o.gpuAdamwUnits);
    return buildStreamSchedule(p, o);
  }
  const plan::Optimizer &opt = p.optimizer();
  int best = 0;
  if (opt.clip() <= 0 && opt.grad_accum() <= 1 && most > 0) {
    auto n = fewestNearFastest(p, o, most, setOnGpu);
    if (!n) return n.takeError();
    best = *n;
  }
  setOnGpu(best);
  return buildStreamSchedule(p, o);
}

} // namespace megac::codegen
