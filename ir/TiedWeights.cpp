#include "ir/TiedWeights.h"

namespace megac::ir {

static bool isView(const std::string &type) {
  return type == "Transpose" || type == "Reshape" || type == "Identity" || type == "Cast" || type == "Squeeze" ||
         type == "Unsqueeze";
}

// The operand slots of a product that take a weight.
static bool isProductOperand(const Op &op, size_t slot) {
  if (op.type == "MatMul" || op.type == "Gemm") return slot < 2;
  if (op.type == "megac.LinearCrossEntropy") return slot == 1;
  return false;
}

std::set<ValueId> tiedEmbeddingHeads(const Graph &g) {
  auto users = g.computeUsers();
  std::set<ValueId> tied;
  for (ValueId p = 0; p < ValueId(g.values.size()); ++p) {
    const Value &v = g.value(p);
    if (!v.isInitializer() || (v.kind == ValueKind::Const && !v.frozen && v.hasData())) continue;
    bool embedding = false, product = false;
    std::vector<ValueId> work{p};
    std::set<ValueId> seen{p};
    while (!work.empty()) {
      ValueId x = work.back();
      work.pop_back();
      for (int32_t u : users[size_t(x)]) {
        const Op &op = g.ops[size_t(u)];
        if (op.dead) continue;
        for (size_t s = 0; s < op.inputs.size(); ++s) {
          if (op.inputs[s] != x) continue;
          if (op.type == "Gather" && s == 0 && x == p) embedding = true;
          if (isProductOperand(op, s)) product = true;
        }
        if (isView(op.type))
          for (ValueId o : op.outputs)
            if (o != kNoValue && seen.insert(o).second) work.push_back(o);
      }
    }
    if (embedding && product) tied.insert(p);
  }
  return tied;
}

} // namespace megac::ir
