#include "codegen/ResidentPolicy.h"

#include "runtime/plan/CostModel.h"
#include "runtime/plan/StreamLayout.h"

#include <algorithm>

namespace megac::codegen {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

llvm::Expected<int> parseResidentUnits(llvm::StringRef s) {
  if (s == "auto") return -1;
  int n = 0;
  if (s.getAsInteger(10, n) || n < 0) return err("--resident-units must be auto or a count >= 0, got '" + s + "'");
  return n;
}

std::vector<int> residentCandidates(const plan::Plan &p) {
  std::vector<int> units;
  for (int u = 0; u < p.units_size(); ++u)
    if (plan::canBeResident(p, u)) units.push_back(u);
  return units;
}

llvm::Error applyResidentPolicy(plan::Plan &p, const ScheduleOptions &o) {
  const std::vector<int> candidates = residentCandidates(p);
  const int most = int(candidates.size());
  auto setResident = [&](int n) {
    for (plan::Unit &u : *p.mutable_units()) u.set_resident(false);
    for (int i = 0; i < n; ++i) p.mutable_units(candidates[size_t(i)])->set_resident(true);
  };
  if (o.residentUnits > most) {
    std::string others;
    for (int u = 0, i = 0; u < p.units_size(); ++u) {
      if (i < most && candidates[size_t(i)] == u) {
        ++i;
        continue;
      }
      others += (others.empty() ? "'" : ", '") + p.units(u).name() + "'";
    }
    if (others.empty())
      return err("--resident-units " + llvm::Twine(o.residentUnits) + ": the plan has " + llvm::Twine(most) + " units");
    return err("--resident-units " + llvm::Twine(o.residentUnits) + ": " + llvm::Twine(most) + " of the plan's " +
               llvm::Twine(p.units_size()) + " units can be resident; " + others +
               " cannot (a unit that shares a parameter with another, as tied weights do, or has none)");
  }
  if (o.residentUnits >= 0) {
    setResident(o.residentUnits);
    return buildStreamSchedule(p, o);
  }
  const plan::Optimizer &opt = p.optimizer();
  int best = 0;
  if (opt.clip() <= 0 && opt.grad_accum() <= 1) {
    const int64_t limit = o.gpuBudgetBytes / 100 * 97;
    std::vector<double> predicted; // by count, while the plan fits
    for (int n = 0; n <= most; ++n) {
      setResident(n);
      if (auto e = buildStreamSchedule(p, o)) return e;
      if (p.schedule().device_bytes() > limit) break;
      auto pred = plan::predictStep(p, o.profile);
      if (!pred) return pred.takeError();
      predicted.push_back(pred->stepSeconds);
    }
    if (!predicted.empty()) {
      const double fastest = *std::min_element(predicted.begin(), predicted.end());
      while (best + 1 < int(predicted.size()) && predicted[size_t(best)] > fastest * 1.005) ++best;
    }
  }
  setResident(best);
  return buildStreamSchedule(p, o);
}

} // namespace megac::codegen
