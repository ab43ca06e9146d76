#include "codegen/UpdateOrderPolicy.h"

#include "codegen/Budget.h"
#include "codegen/CountPolicy.h"
#include "runtime/plan/StreamLayout.h"

#include <algorithm>
#include <limits>

namespace megac::codegen {

llvm::Expected<UpdateOrder> parseUpdateOrder(llvm::StringRef s) {
  if (s == "auto") return UpdateOrder::Auto;
  if (s == "arrival") return UpdateOrder::Arrival;
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "--update-order must be auto or arrival, got '" + s + "'");
}

std::vector<int> earliestNeededFirst(const plan::Plan &p, const plan::StepPrediction &pred) {
  const plan::StreamSchedule &s = p.schedule();
  const int N = p.units_size();
  const double never = std::numeric_limits<double>::infinity();
  std::vector<double> arrives(size_t(N), never), takes(size_t(N), 0.0);
  for (int i = 0; i < s.actions_size() && size_t(i) < pred.actions.size(); ++i) {
    const plan::StreamAction &a = s.actions(i);
    if (a.unit() < 0 || a.unit() >= N) continue;
    if (a.kind() == plan::StreamAction::OFFLOAD) arrives[size_t(a.unit())] = pred.actions[size_t(i)].end;
    if (a.kind() == plan::StreamAction::UPDATE && a.stream() == plan::StreamAction::CPU)
      takes[size_t(a.unit())] = pred.actions[size_t(i)].end - pred.actions[size_t(i)].start;
  }
  std::vector<int> left;
  for (int u = 0; u < N; ++u)
    if (plan::steppedOnHost(p.units(u)) && arrives[size_t(u)] < never) left.push_back(u);
  std::vector<bool> done(size_t(N), false);
  // A unit sharing a parameter updates it with the last contribution, that
  // of the lowest unit: the units after it that share one go first.
  auto ready = [&](int u) {
    for (int v : plan::unitsSharingParameters(p, u))
      if (v > u && plan::steppedOnHost(p.units(v)) && !done[size_t(v)]) return false;
    return true;
  };
  std::vector<int> order;
  double t = 0;
  while (!left.empty()) {
    int pick = -1, next = -1; // the lowest unit whose gradients have come; else the next to come
    for (int u : left) {
      if (!ready(u)) continue;
      if (arrives[size_t(u)] <= t) {
        if (pick < 0 || u < pick) pick = u;
      } else if (next < 0 || arrives[size_t(u)] < arrives[size_t(next)]) {
        next = u;
      }
    }
    if (pick < 0) pick = next >= 0 ? next : left.front(); // the highest unit left is always ready
    t = std::max(t, arrives[size_t(pick)]) + takes[size_t(pick)];
    done[size_t(pick)] = true;
    order.push_back(pick);
    left.erase(std::find(left.begin(), left.end(), pick));
  }
  return order;
}

llvm::Error applyUpdateOrderPolicy(plan::Plan &p, ScheduleOptions &o) {
  if (o.updateOrder != UpdateOrder::Auto || !p.schedule().overlap_steps()) return llvm::Error::success();
  auto base = plan::predictStep(p, o.profile);
  if (!base) return base.takeError();
  const int64_t limit = o.gpuBudgetBytes / 100 * 97;
  ScheduleOptions tried = o;
  // Each slot count in turn while the plan fits; the first build (arrival
  // order, the most slots) says when each unit's gradients come where the
  // host does not hold the backward back, the order is made from it.
  std::vector<int> counts;
  for (int slots : {2, 3, 4, 6, 8, 12, 16}) {
    tried.gradSlots = slots;
    if (auto e = buildStreamSchedule(p, tried)) return e;
    if (p.schedule().device_bytes() > limit || !fitsHostBudget(p, o.hostBudgetBytes)) break;
    counts.push_back(slots);
  }
  if (counts.empty()) return buildStreamSchedule(p, o);
  tried.gradSlots = counts.back();
  if (auto e = buildStreamSchedule(p, tried)) return e;
  auto free = plan::predictStep(p, o.profile);
  if (!free) return free.takeError();
  const std::vector<int> order = earliestNeededFirst(p, *free);
  if (order.size() < 3 || std::is_sorted(order.rbegin(), order.rend())) return buildStreamSchedule(p, o); // arrival order
  tried.hostUpdateOrder = order;
  // The fewest slots within 0.5% of the fastest, as the count policies choose.
  auto pick = fewestNearFastest(p, tried, int(counts.size()) - 1, [&](int n) { tried.gradSlots = counts[size_t(n)]; });
  if (!pick) return pick.takeError();
  tried.gradSlots = counts[size_t(*pick)];
  if (auto e = buildStreamSchedule(p, tried)) return e;
  auto chosen = plan::predictStep(p, o.profile);
  if (!chosen) return chosen.takeError();
  if (chosen->stepSeconds > base->stepSeconds * 0.99) return buildStreamSchedule(p, o); // not worth the slots
  o.hostUpdateOrder = order;
  o.gradSlots = tried.gradSlots;
  return llvm::Error::success(); // built with these
}

} // namespace megac::codegen
