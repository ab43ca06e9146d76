// specialize: with every dimension static, infer each op's output types in
// order and evaluate, at compile time, every op whose inputs are all
// constants (shape arithmetic, masks, rotary tables...). What remains is the
// real compute.
#include "ir/Eval.h"
#include "ir/OpSchema.h"
#include "passes/Pass.h"

namespace megac::passes {

using namespace ir;

static bool allOutputsConst(const Graph &g, const Op &op) {
  for (ValueId o : op.outputs)
    if (o != kNoValue && !(g.value(o).kind == ValueKind::Const && g.value(o).data)) return false;
  return true;
}

static bool canFold(Graph &g, const Op &op, const OpSchema &schema, const PassOptions &opts) {
  if (!schema.foldable) return false;
  int64_t outElems = 0;
  for (ValueId o : op.outputs) {
    if (o == kNoValue) continue;
    const TensorType &t = g.type(o);
    if (!t.known() || t.isSequence) return false;
    outElems += numElements(t.shape);
  }
  if (outElems > opts.foldLimit) return false;
  for (ValueId in : op.inputs) {
    if (in == kNoValue) continue;
    const Value &v = g.value(in);
    if (v.kind != ValueKind::Const || !v.hasData() || v.type.isSequence) return false;
  }
  return true;
}

llvm::Error specialize(Graph &g, const PassOptions &opts) {
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].dead) continue;
    const OpSchema *schema = lookupOpSchema(g.ops[i].type);
    if (!schema) return opError(g, g.ops[i], "unsupported op");
    for (ValueId in : g.ops[i].inputs)
      if (in != kNoValue && !g.type(in).known())
        return opError(g, g.ops[i], "input '" + g.value(in).name + "' has no type (is it defined?)");
    InferContext ctx(g, int32_t(i));
    if (schema->infer)
      if (auto e = schema->infer(ctx)) return e;
    for (ValueId o : g.ops[i].outputs)
      if (o != kNoValue && !g.type(o).known())
        return opError(g, g.ops[i], "type inference left output '" + g.value(o).name + "' untyped");
    if (allOutputsConst(g, g.ops[i])) {
      g.ops[i].dead = true;
      continue;
    }
    if (!canFold(g, g.ops[i], *schema, opts)) continue;
    std::vector<Tensor> held;
    held.reserve(g.ops[i].inputs.size());
    std::vector<const Tensor *> ins;
    for (ValueId in : g.ops[i].inputs) {
      if (in == kNoValue) {
        ins.push_back(nullptr);
        continue;
      }
      auto t = g.tensorOf(in);
      if (!t) return t.takeError();
      held.push_back(*t);
      ins.push_back(&held.back());
    }
    auto outs = evalOp(g, int32_t(i), ins);
    if (!outs) return outs.takeError();
    Op &op = g.ops[i];
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      if (op.outputs[k] == kNoValue) continue;
      Value &v = g.value(op.outputs[k]);
      v.kind = ValueKind::Const;
      v.data = std::move((*outs)[k]);
      v.producer = -1;
    }
    op.dead = true;
  }
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
