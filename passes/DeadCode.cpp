// dce: remove ops none of whose results reaches a graph output.
#include "passes/Pass.h"

namespace megac::passes {

using namespace ir;

void markUnusedOpsDead(Graph &g, const std::vector<ValueId> &roots) {
  std::vector<bool> live(g.values.size(), false);
  for (ValueId o : roots) live[size_t(o)] = true;
  for (size_t i = g.ops.size(); i-- > 0;) {
    Op &op = g.ops[i];
    if (op.dead) continue;
    bool used = false;
    for (ValueId o : op.outputs) used |= o != kNoValue && live[size_t(o)];
    if (!used) {
      op.dead = true;
      continue;
    }
    for (ValueId in : op.inputs)
      if (in != kNoValue) live[size_t(in)] = true;
  }
}

llvm::Error eliminateDeadCode(Graph &g, const PassOptions &) {
  markUnusedOpsDead(g, g.outputs);
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
