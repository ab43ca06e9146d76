#include "runtime/plan/TokenRows.h"

#include "runtime/plan/StreamLayout.h"
#include "runtime/plan/UnitPrograms.h"

#include <algorithm>
#include <cmath>

namespace megac::plan {

static int64_t gatherAxis(const Program::Op &op) {
  for (const Attribute &a : op.attributes())
    if (a.name() == "axis" && a.value_case() == Attribute::kI) return a.i();
  return 0;
}

bool readOnlyByTokenGather(const Plan &plan, int32_t param) {
  if (param < 0 || param >= plan.parameters_size()) return false;
  const Parameter &p = plan.parameters(param);
  if (p.units_size() != 1 || p.type().shape_size() < 1 || p.tied_embedding_head()) return false;
  const int32_t u = p.units(0);
  if (u < 0 || u >= plan.units_size()) return false;
  const Unit &unit = plan.units(u);
  // The template's argument positions of the unit's token input.
  std::vector<int> tokenArgs;
  for (int k = 0; k < unit.activation_inputs_size(); ++k) {
    const int32_t act = unit.activation_inputs(k);
    if (act >= 0 && act < plan.activations_size() && plan.activations(act).kind() == Activation::DATA_TOKENS)
      tokenArgs.push_back(k);
  }
  if (tokenArgs.empty()) return false;
  bool read = false;
  const bool onlyGathers = forEachParameterRead(plan, param, [&](const Program &prog, const Program::Op &op, int i) {
    read = true;
    if (op.type() != "Gather" || i != 0 || gatherAxis(op) != 0 || op.inputs_size() < 2) return false;
    return std::any_of(tokenArgs.begin(), tokenArgs.end(), [&](int a) {
      return a < prog.arguments_size() && prog.arguments(a) == op.inputs(1);
    });
  });
  return onlyGathers && read;
}

std::vector<int32_t> unreadRowsParameters(const Plan &plan, int unit) {
  std::vector<int32_t> out;
  if (unit < 0 || unit >= plan.units_size()) return out;
  if (plan.optimizer().clip() > 0 || !steppedOnHost(plan.units(unit))) return out;
  for (int32_t q : plan.units(unit).parameters())
    if (readOnlyByTokenGather(plan, q)) out.push_back(q);
  return out;
}

std::vector<bool> unitsSteppingUnreadRowsEarly(const Plan &plan) {
  std::vector<bool> early(size_t(plan.units_size()), false);
  if (plan.has_schedule())
    for (const StreamAction &a : plan.schedule().actions())
      if (a.kind() == StreamAction::UPDATE_UNREAD_ROWS && a.unit() >= 0 && a.unit() < plan.units_size())
        early[size_t(a.unit())] = true;
  return early;
}

double readRowsShare(const Plan &plan, int32_t param) {
  const int64_t rows = parameterRows(plan.parameters(param));
  const double tokens = double(std::max<int64_t>(plan.batch(), 1)) * double(std::max<int64_t>(plan.seq(), 1)) *
                        double(stepMicroBatches(plan));
  if (rows <= 1) return 1.0;
  return std::clamp(-std::expm1(tokens * std::log1p(-1.0 / double(rows))), 0.0, 1.0);
}

std::string unitFetchedEventName(int unit) { return "u" + std::to_string(unit) + ".fetched"; }

} // namespace megac::plan
