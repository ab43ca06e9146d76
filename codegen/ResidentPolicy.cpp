#include "codegen/ResidentPolicy.h"

#include "codegen/CountPolicy.h"
#include "runtime/plan/StreamLayout.h"

#include <algorithm>

namespace megac::codegen {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

llvm::Expected<int> parseResidentUnits(llvm::StringRef s) { return parseCountOrAuto("--resident-units", s); }

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
  int best = 0;
  if (!plan::stepKeepsGradients(p)) { // else AdamW runs on the host after the step, for every unit
    auto n = fewestNearFastest(p, o, most, setResident);
    if (!n) return n.takeError();
    best = *n;
  }
  setResident(best);
  return buildStreamSchedule(p, o);
}

} // namespace megac::codegen
