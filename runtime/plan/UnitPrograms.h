#pragma once
// Which program a unit runs (the recompute policy's choice, Unit.keep_activations)
// and where its saved values go: shared by codegen, the plan checker, the cost
// model and both runtimes.
#include "runtime/plan/PlanIO.h"

#include <functional>
#include <vector>

namespace megac::plan {

inline bool keepsActivations(const Plan &p, int unit) {
  return unit >= 0 && unit < p.units_size() && p.units(unit).keep_activations();
}

// The program a unit's FORWARD / BACKWARD runs.
inline const Program &forwardProgram(const Plan &p, int unit) {
  const Template &t = p.templates(p.units(unit).template_id());
  return keepsActivations(p, unit) ? t.forward_keep() : t.forward();
}
inline const Program &backwardProgram(const Plan &p, int unit) {
  const Template &t = p.templates(p.units(unit).template_id());
  return keepsActivations(p, unit) ? t.backward_kept() : t.backward();
}

// Whether a template holds the keep variants.
inline bool hasKeepPrograms(const Template &t) { return t.has_forward_keep() && t.has_backward_kept(); }

// Every program a template holds, forward, backward, then the keep variants
// where present: what arenas, constants and the workspace budget cover.
std::vector<const Program *> templatePrograms(const Template &t);
std::vector<Program *> mutableTemplatePrograms(Template &t);
const char *programRoleName(int index); // "forward", "backward", "forward_keep", "backward_kept"
// Calls read(program, op, position) for every op input that reads parameter
// `param`, in every program of every unit that has it; false where read
// returns false, a program returns the parameter as a result, or the plan
// does not hold what the parameter names (a unit, a template, an argument).
bool forEachParameterRead(const Plan &p, int32_t param,
                          const std::function<bool(const Program &, const Program::Op &, int)> &read);
// The largest arena of any program of the plan: what the ARENA region holds.
int64_t largestArenaBytes(const Plan &p);
// The slices of the sequence its MLP blocks run over (passes/ChunkSequence.cpp
// marks each slice's ops megac.chunk = c): 1 + the largest c, 1 where none.
int64_t sequenceChunks(const Plan &p);

// The saved values of a template's forward_keep (its results after the
// activation outputs) in a SAVED region: each 256-byte aligned, in order.
struct SavedLayout {
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
};
SavedLayout savedLayout(const Template &t);

} // namespace megac::plan
