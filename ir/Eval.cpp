#include "ir/Eval.h"

#include "runtime/cpu/Kernel.h"

namespace megac::ir {

llvm::Expected<std::vector<Tensor>> evalOp(Graph &g, int32_t opIndex, const std::vector<const Tensor *> &inputs) {
  const Op &op = g.ops[size_t(opIndex)];
  std::vector<Tensor> outs;
  outs.reserve(op.outputs.size());
  for (ValueId o : op.outputs) {
    if (o == kNoValue) {
      outs.emplace_back();
      continue;
    }
    const TensorType &t = g.type(o);
    if (!t.known() || t.isSequence)
      return opError(g, op, "output '" + g.value(o).name + "' has no static type; it cannot be evaluated");
    outs.emplace_back(t.dtype, t.shape);
  }
  cpu::KernelContext ctx{op.attrs, inputs, {}};
  for (Tensor &t : outs) ctx.outputs.push_back(&t);
  if (llvm::Error e = cpu::runKernel(op.type, ctx))
    return opError(g, op, llvm::toString(std::move(e)));
  return outs;
}

llvm::Expected<std::vector<Tensor>> runGraph(Graph &g, const std::map<std::string, Tensor> &feeds) {
  std::vector<Tensor> env(g.values.size());
  std::vector<bool> have(g.values.size(), false);
  for (ValueId in : g.inputs) {
    const Value &v = g.value(in);
    auto it = feeds.find(v.name);
    if (it == feeds.end()) return graphError(g, "no data given for graph input '" + v.name + "'");
    if (it->second.dtype() != v.type.dtype || it->second.shape() != v.type.shape)
      return graphError(g, "input '" + v.name + "' is " + dtypeName(it->second.dtype()) +
                               shapeToString(it->second.shape()) + " but the graph wants " + v.type.str());
    env[size_t(in)] = it->second;
    have[size_t(in)] = true;
  }
  // Remaining uses of each value, so intermediates are freed early.
  std::vector<int32_t> uses(g.values.size(), 0);
  for (const Op &op : g.ops)
    if (!op.dead)
      for (ValueId v : op.inputs)
        if (v != kNoValue) ++uses[size_t(v)];
  for (ValueId o : g.outputs) uses[size_t(o)] += 1 << 20;

  for (size_t i = 0; i < g.ops.size(); ++i) {
    Op &op = g.ops[i];
    if (op.dead) continue;
    std::vector<const Tensor *> ins;
    for (ValueId v : op.inputs) {
      if (v == kNoValue) {
        ins.push_back(nullptr);
        continue;
      }
      if (!have[size_t(v)]) {
        if (!g.value(v).isInitializer())
          return opError(g, op, "input '" + g.value(v).name + "' is used before it is computed");
        auto t = g.tensorOf(v);
        if (!t) return t.takeError();
        env[size_t(v)] = *t;
        have[size_t(v)] = true;
      }
      ins.push_back(&env[size_t(v)]);
    }
    auto outs = evalOp(g, int32_t(i), ins);
    if (!outs) return outs.takeError();
    for (size_t k = 0; k < op.outputs.size(); ++k)
      if (op.outputs[k] != kNoValue) {
        env[size_t(op.outputs[k])] = std::move((*outs)[k]);
        have[size_t(op.outputs[k])] = true;
      }
    for (ValueId v : op.inputs)
      if (v != kNoValue && --uses[size_t(v)] == 0 && !g.value(v).isInitializer()) env[size_t(v)] = Tensor();
  }
  std::vector<Tensor> result;
  for (ValueId o : g.outputs) {
    if (!have[size_t(o)]) {
      auto t = g.tensorOf(o);
      if (!t) return t.takeError();
      result.push_back(*t);
    } else {
      result.push_back(env[size_t(o)]);
    }
  }
  return result;
}

} // namespace megac::ir
