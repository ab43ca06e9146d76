#include "codegen/ResidentPolicy.h"

#include "runtime/plan/CostModel.h"

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

int residentCandidates(const plan::Plan &p) {
  int n = 0;
  for (; n < p.units_size(); ++n) {
    const plan::Unit &u = p.units(n);
    bool tied = false;
    for (int32_t q : u.parameters()) tied |= p.parameters(q).units_size() > 1;
    if (tied || u.parameters_size() == 0) break;
  }
  return n;
}

static void setResident(plan::Plan &p, int n) {
  for (int u = 0; u < p.units_size(); ++u) p.mutable_units(u)->set_resident(u < n);
}

llvm::Error applyResidentPolicy(plan::Plan &p, const ScheduleOptions &o) {
  const int most = residentCandidates(p);
  if (o.residentUnits > p.units_size())
    return err("--resident-units " + llvm::Twine(o.residentUnits) + ": the plan has " + llvm::Twine(p.units_size()) +
               " units");
  if (o.residentUnits > most) {
    const plan::Unit &u = p.units(most);
    std::string why = u.parameters_size() == 0 ? "has no parameters" : "shares a parameter with another unit (tied weights, summed on the host)";
    return err("--resident-units " + llvm::Twine(o.residentUnits) + ": unit '" + u.name() + "' " + why +
               " and cannot be resident; at most " + llvm::Twine(most) + " leading units can");
  }
  if (o.residentUnits >= 0) {
    setResident(p, o.residentUnits);
    return buildStreamSchedule(p, o);
  }
  const plan::Optimizer &opt = p.optimizer();
  int best = 0;
  if (opt.clip() <= 0 && opt.grad_accum() <= 1) {
    const int64_t limit = o.gpuBudgetBytes / 100 * 97;
    double bestSeconds = 0;
    for (int n = 0; n <= most; ++n) {
      setResident(p, n);
      if (auto e = buildStreamSchedule(p, o)) return e;
      if (p.schedule().device_bytes() > limit) break;
      auto pred = plan::predictStep(p, o.profile);
      if (!pred) return pred.takeError();
      if (n == 0 || pred->stepSeconds < bestSeconds * 0.995) {
        best = n;
        bestSeconds = pred->stepSeconds;
      } else if (n >= best + 2) {
        break; // two more units gained nothing
      }
    }
  }
  setResident(p, best);
  return buildStreamSchedule(p, o);
}

} // namespace megac::codegen
