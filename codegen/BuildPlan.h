#pragma once
// Lowers a partitioned training graph (after append-loss and
// partition-units) into a plan: one forward and one backward program per
// distinct unit structure (the layer templates), the units binding
// parameters and activations to them, and the parameter table.
#include "codegen/StreamSchedule.h"
#include "ir/Graph.h"
#include "runtime/plan/PlanIO.h"

namespace megac::codegen {

struct CodegenOptions {
  std::string modelPath;
  plan::Optimizer optimizer = plan::defaultOptimizer();
  std::string compute = "fp32";
  int64_t ignoreIndex = -100;
  bool hashWeights = true;
  // Fused attention gradients read their Q, K and V from the attention stash
  // where runtime/plan/AttentionStash.h allows (false: tests compare).
  bool stashAttentionOperands = true;
  ScheduleOptions schedule; // streaming schedule and budgets (compileForTraining)
};

llvm::Expected<plan::Plan> buildPlan(ir::Graph &g, const CodegenOptions &opts);

// Converts a graph into a program; `arguments` and `results` are values of g.
llvm::Expected<plan::Program> toProgram(const ir::Graph &g, const std::vector<ir::ValueId> &arguments,
                                        const std::vector<ir::ValueId> &results);

} // namespace megac::codegen
