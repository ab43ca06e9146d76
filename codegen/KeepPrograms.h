#pragma once
// The recompute policy's alternative programs of a template (plan.proto:
// Template.forward_keep, backward_kept): instead of recomputing the forward
// from the unit's input checkpoint, the forward hands the backward the values
// it needs (the "saved" values).
#include "ir/Graph.h"
#include "runtime/plan/PlanIO.h"

namespace megac::codegen {

struct UnitPrograms {
  const ir::Graph *forward;  // the unit's graph before differentiation
  ir::Graph *backward;       // the same graph with the gradient ops appended, unused ops dead
  size_t numForwardOps;      // backward's ops below this index are the recomputation
  std::vector<ir::ValueId> forwardArgs, forwardResults, backwardArgs, backwardResults;
};

// Fills t.forward_keep and t.backward_kept. The saved values are the
// recomputed values the gradient ops read, in value order; a view op
// (Reshape, Squeeze, Unsqueeze, Flatten, Identity) stays in backward_kept and
// its input is saved instead, so no bytes are kept twice. A template whose
// backward recomputes nothing gets no keep programs.
llvm::Error addKeepPrograms(const UnitPrograms &u, plan::Template &t);

} // namespace megac::codegen
