// specialize: with every dimension static, infer each op's output types in
// order and evaluate, at compile time, every op whose inputs are all
// constants (shape arithmetic, masks, rotary tables...). What remains is the
// real compute.
#include "ir/Eval.h"
#include "ir/OpSchema.h"
#include "passes/Pass.h"
#include "runtime/core/Hash.h"

#include <cstring>
#include <unordered_map>

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

// Folds of one op on equal constants share one result: an export that
// rebuilds the causal mask in every layer then holds one [batch, 1, seq, seq]
// mask, not one per layer (405B at seq 4096: 126 x 64 MiB per sequence).
class FoldMemo {
public:
  // An earlier fold of the same op on equal inputs, or -1.
  int32_t find(const Graph &g, const Op &op) const {
    auto it = byKey_.find(key(g, op));
    if (it == byKey_.end()) return -1;
    for (int32_t earlier : it->second)
      if (same(g, g.ops[size_t(earlier)], op)) return earlier;
    return -1;
  }
  void add(const Graph &g, int32_t opIndex) { byKey_[key(g, g.ops[size_t(opIndex)])].push_back(opIndex); }

private:
  // Type, input types and a sample of each input's bytes (equality is then checked in full).
  static uint64_t key(const Graph &g, const Op &op) {
    uint64_t h = fnv1a(kFnvOffset, op.type.data(), op.type.size());
    for (ValueId in : op.inputs) {
      if (in == kNoValue) {
        h = fnv1a(h, "-", 1);
        continue;
      }
      const Value &v = g.value(in);
      std::string t = v.type.str();
      h = fnv1a(h, t.data(), t.size());
      if (!v.data) continue;
      const size_t n = v.data->nbytes(), head = std::min<size_t>(n, 256);
      h = fnv1a(h, v.data->raw(), head);
      h = fnv1a(h, static_cast<const uint8_t *>(v.data->raw()) + (n - head), head);
    }
    return h;
  }
  static bool sameInput(const Graph &g, ValueId a, ValueId b) {
    if (a == b) return true;
    if (a == kNoValue || b == kNoValue) return false;
    const Value &x = g.value(a), &y = g.value(b);
    if (x.type != y.type || !x.data || !y.data) return false;
    return std::memcmp(x.data->raw(), y.data->raw(), x.data->nbytes()) == 0;
  }
  static bool same(const Graph &g, const Op &a, const Op &b) {
    if (a.type != b.type || !(a.attrs == b.attrs) || a.inputs.size() != b.inputs.size() ||
        a.outputs.size() != b.outputs.size())
      return false;
    for (size_t k = 0; k < a.inputs.size(); ++k)
      if (!sameInput(g, a.inputs[k], b.inputs[k])) return false;
    for (size_t k = 0; k < a.outputs.size(); ++k)
      if ((a.outputs[k] == kNoValue) != (b.outputs[k] == kNoValue)) return false;
    return true;
  }
  std::unordered_map<uint64_t, std::vector<int32_t>> byKey_;
};

llvm::Error specialize(Graph &g, const PassOptions &opts) {
  FoldMemo memo;
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
    if (int32_t earlier = memo.find(g, g.ops[i]); earlier >= 0) {
      Op &op = g.ops[i];
      for (size_t k = 0; k < op.outputs.size(); ++k)
        if (op.outputs[k] != kNoValue) g.replaceAllUses(op.outputs[k], g.ops[size_t(earlier)].outputs[k]);
      op.dead = true;
      continue;
    }
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
    memo.add(g, int32_t(i));
  }
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
