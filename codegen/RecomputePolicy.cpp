#include "codegen/RecomputePolicy.h"

#include "codegen/CostModel.h"
#include "runtime/plan/UnitPrograms.h"

#include <algorithm>

namespace megac::codegen {

llvm::Expected<Recompute> parseRecompute(llvm::StringRef s) {
  if (s == "auto") return Recompute::Auto;
  if (s == "all") return Recompute::All;
  if (s == "none") return Recompute::None;
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "--recompute must be auto, all or none, got '" + s.str() + "'");
}

namespace {

// Seconds of the template's forward at the cost model's rates: what keeping saves.
llvm::Expected<double> forwardSeconds(const plan::Plan &p, const plan::Template &t, const plan::CostRates &r) {
  auto w = plan::programWork(t.forward(), p.compute() == "bf16");
  if (!w) return w.takeError();
  return plan::programSeconds(*w, r);
}

void setKept(plan::Plan &p, const std::vector<int> &units, size_t count) {
  for (plan::Unit &u : *p.mutable_units()) u.set_keep_activations(false);
  for (size_t i = 0; i < count; ++i) p.mutable_units(units[i])->set_keep_activations(true);
}

} // namespace

llvm::Error applyRecomputePolicy(plan::Plan &p, const ScheduleOptions &o) {
  // Candidates: units whose backward recomputes something.
  struct Candidate {
    int unit;
    double secondsPerByte;
  };
  auto rates = plan::costRates(o.profile, p.compute());
  if (!rates) return rates.takeError();
  std::vector<Candidate> cands;
  for (int u = 0; u < p.units_size(); ++u) {
    const plan::Template &t = p.templates(p.units(u).template_id());
    if (!plan::hasKeepPrograms(t)) continue;
    auto s = forwardSeconds(p, t, *rates);
    if (!s) return s.takeError();
    cands.push_back({u, *s / double(std::max<int64_t>(plan::savedLayout(t).bytes, 1))});
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate &a, const Candidate &b) {
    return a.secondsPerByte != b.secondsPerByte ? a.secondsPerByte > b.secondsPerByte : a.unit > b.unit;
  });
  std::vector<int> order;
  for (const Candidate &c : cands) order.push_back(c.unit);

  size_t kept = 0;
  if (o.recompute == Recompute::None) {
    kept = order.size();
  } else if (o.recompute == Recompute::Auto && !order.empty()) {
    const int64_t limit = o.gpuBudgetBytes / 100 * 97;
    auto fits = [&](size_t k, const std::vector<int> &units) -> llvm::Expected<bool> {
      setKept(p, units, k);
      if (auto e = buildStreamSchedule(p, o)) return std::move(e);
      return p.schedule().device_bytes() <= limit;
    };
    // The largest k that fits (device bytes grow with k).
    size_t lo = 0, hi = order.size();
    auto all = fits(hi, order);
    if (!all) return all.takeError();
    if (*all) lo = hi;
    while (lo < hi) {
      size_t mid = (lo + hi + 1) / 2;
      auto f = fits(mid, order);
      if (!f) return f.takeError();
      if (*f) lo = mid;
      else hi = mid - 1;
    }
    kept = lo;
    // Then each remaining unit, in rank order, that still fits on its own
    // (a smaller unit may fit where the next in rank did not).
    std::vector<int> chosen(order.begin(), order.begin() + long(kept));
    for (size_t i = kept; i < order.size(); ++i) {
      chosen.push_back(order[i]);
      auto f = fits(chosen.size(), chosen);
      if (!f) return f.takeError();
      if (!*f) chosen.pop_back();
    }
    order = chosen;
    kept = chosen.size();
  }
  setKept(p, order, kept);
  // Keep programs only where a unit runs them (they would only widen the
  // arena and the constants).
  std::vector<bool> used(size_t(p.templates_size()), false);
  for (const plan::Unit &u : p.units())
    if (u.keep_activations()) used[size_t(u.template_id())] = true;
  for (int t = 0; t < p.templates_size(); ++t)
    if (!used[size_t(t)]) {
      p.mutable_templates(t)->clear_forward_keep();
      p.mutable_templates(t)->clear_backward_kept();
    }
  return buildStreamSchedule(p, o);
}

} // namespace megac::codegen
