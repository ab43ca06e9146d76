#include "runtime/plan/UnitPrograms.h"

#include "runtime/plan/ArenaRules.h"

#include <algorithm>

namespace megac::plan {

bool forEachParameterRead(const Plan &p, int32_t param,
                          const std::function<bool(const Program &, const Program::Op &, int)> &read) {
  if (param < 0 || param >= p.parameters_size()) return false;
  for (int32_t u : p.parameters(param).units()) {
    if (u < 0 || u >= p.units_size()) return false;
    const Unit &unit = p.units(u);
    if (unit.template_id() < 0 || unit.template_id() >= p.templates_size()) return false;
    const Template &t = p.templates(unit.template_id());
    for (int k = 0; k < unit.parameters_size(); ++k) {
      if (unit.parameters(k) != param) continue;
      const int arg = t.num_activation_inputs() + k;
      for (const Program *prog : templatePrograms(t)) {
        if (arg >= prog->arguments_size()) return false;
        const int32_t value = prog->arguments(arg);
        if (std::find(prog->results().begin(), prog->results().end(), value) != prog->results().end()) return false;
        for (const Program::Op &op : prog->ops())
          for (int i = 0; i < op.inputs_size(); ++i)
            if (op.inputs(i) == value && !read(*prog, op, i)) return false;
      }
    }
  }
  return true;
}

std::vector<const Program *> templatePrograms(const Template &t) {
  std::vector<const Program *> v{&t.forward(), &t.backward()};
  if (hasKeepPrograms(t)) {
    v.push_back(&t.forward_keep());
    v.push_back(&t.backward_kept());
  }
  return v;
}

std::vector<Program *> mutableTemplatePrograms(Template &t) {
  std::vector<Program *> v{t.mutable_forward(), t.mutable_backward()};
  if (hasKeepPrograms(t)) {
    v.push_back(t.mutable_forward_keep());
    v.push_back(t.mutable_backward_kept());
  }
  return v;
}

int64_t largestArenaBytes(const Plan &p) {
  int64_t most = 0;
  for (const Template &t : p.templates())
    for (const Program *prog : templatePrograms(t)) most = std::max(most, prog->arena_bytes());
  return most;
}

const char *programRoleName(int index) {
  static const char *names[] = {"forward", "backward", "forward_keep", "backward_kept"};
  return index >= 0 && index < 4 ? names[index] : "program";
}

SavedLayout savedLayout(const Template &t) {
  SavedLayout l;
  const Program &f = t.forward_keep();
  for (int r = t.num_activation_outputs(); r < f.results_size(); ++r) {
    int32_t v = f.results(r);
    l.offsets.push_back(l.bytes);
    int64_t n = v >= 0 && v < f.values_size() ? typeBytes(f.values(v).type()) : 0;
    l.bytes += alignUp(std::max<int64_t>(n, 0));
  }
  return l;
}

int64_t sequenceChunks(const Plan &p) {
  int64_t most = 0;
  for (const Template &t : p.templates())
    for (const Program::Op &op : t.forward().ops())
      for (const Attribute &a : op.attributes())
        if (a.name() == "megac.chunk") most = std::max(most, a.i());
  return most + 1;
}

} // namespace megac::plan
