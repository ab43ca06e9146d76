// lower-sequences: exporters write torch.split as SplitToSequence followed
// by SequenceAt at constant positions. Sequences have no static tensor type,
// so this pass replaces each such SplitToSequence by a Split with one output
// per element (plus a Squeeze per used element where keepdims=0 drops the
// axis) and makes each SequenceAt's result the matching output. Any other
// use of a sequence is an error naming the node. Needs typed inputs (run
// specialize first).
#include "ir/ops/ShapeOps.h"
#include "passes/Pass.h"

#include <map>

namespace megac::passes {

using namespace ir;

namespace {

struct Lowering {
  SequenceSplit split;
  // For each element, the value that carries it (kNoValue: unused).
  std::vector<ValueId> elementValue;
};

// Checks every use of SplitToSequence `op`'s sequence and records which
// value each element becomes; duplicate SequenceAts at one position are
// redirected to the first.
llvm::Expected<Lowering> planLowering(Graph &g, int32_t opIndex, const std::vector<std::vector<int32_t>> &users,
                                      std::vector<bool> &removed) {
  const Op &op = g.ops[size_t(opIndex)];
  ValueId seq = op.outputs.empty() ? kNoValue : op.outputs[0];
  auto split = describeSplitToSequence(g, op);
  if (!split) return split.takeError();
  Lowering l{*split, std::vector<ValueId>(split->sizes.size(), kNoValue)};
  if (seq == kNoValue) return l;
  for (ValueId o : g.outputs)
    if (o == seq)
      return opError(g, op, "its sequence '" + g.value(seq).name +
                                "' is a graph output; megac lowers sequences only when every use is a SequenceAt "
                                "at a constant position");
  int64_t n = int64_t(split->sizes.size());
  for (int32_t u : users[size_t(seq)]) {
    Op &user = g.ops[size_t(u)];
    if (user.type == "SequenceLength") {
      ValueId out = user.outputs[0];
      Value &v = g.value(out);
      v.kind = ValueKind::Const;
      v.data = Tensor::fromVector<int64_t>(DType::I64, {}, {n});
      v.type = {DType::I64, {}, false};
      removed[size_t(u)] = true;
      continue;
    }
    if (user.type != "SequenceAt" || user.inputs.size() != 2 || user.inputs[0] != seq)
      return opError(g, user, "uses sequence '" + g.value(seq).name + "' (from SplitToSequence '" + op.name +
                                  "'); megac lowers sequences only when every use is a SequenceAt at a constant "
                                  "position");
    const Tensor *pos = g.constValue(user.inputs[1]);
    if (!pos || pos->numel() != 1 || !isIntegerType(pos->dtype()))
      return opError(g, user, "the position into sequence '" + g.value(seq).name +
                                  "' must be an integer scalar known at compile time");
    int64_t p = pos->getAsInt(0);
    if (p < -n || p >= n)
      return opError(g, user, "position " + llvm::Twine(p) + " is out of range for sequence '" + g.value(seq).name +
                                  "' of " + llvm::Twine(n) + " elements");
    size_t k = size_t(p < 0 ? p + n : p);
    ValueId out = user.outputs.empty() ? kNoValue : user.outputs[0];
    removed[size_t(u)] = true;
    if (out == kNoValue) continue;
    g.value(out).type = {split->dtype, split->elementShape(k), false};
    if (l.elementValue[k] == kNoValue) l.elementValue[k] = out;
    else g.replaceAllUses(out, l.elementValue[k]);
  }
  return l;
}

// The Split (and Squeezes) that replace SplitToSequence `op`.
std::vector<Op> lowerToSplit(Graph &g, const Op &op, const Lowering &l) {
  const SequenceSplit &s = l.split;
  std::vector<Op> ops;
  bool anyUsed = false;
  for (ValueId v : l.elementValue) anyUsed |= v != kNoValue;
  if (!anyUsed || s.sizes.empty()) return ops;
  Op split;
  split.type = "Split";
  split.name = op.name;
  split.attrs.set("axis", Attr::ofInt(s.axis));
  ValueId sizes = g.addConst(op.name + ".split",
                             Tensor::fromVector<int64_t>(DType::I64, {int64_t(s.sizes.size())}, s.sizes));
  split.inputs = {op.inputs[0], sizes};
  std::vector<Op> squeezes;
  ValueId axes = kNoValue;
  for (size_t k = 0; k < s.sizes.size(); ++k) {
    Shape partShape = s.inputShape;
    partShape[size_t(s.axis)] = s.sizes[k];
    ValueId target = l.elementValue[k];
    if (target != kNoValue && !s.squeeze) {
      split.outputs.push_back(target);
      continue;
    }
    Value part;
    part.name = op.name + ".part" + std::to_string(k);
    part.type = {s.dtype, partShape, false};
    ValueId partId = g.addValueUnique(std::move(part));
    split.outputs.push_back(partId);
    if (target == kNoValue) continue;
    if (axes == kNoValue) axes = g.addConst(op.name + ".axes", Tensor::fromVector<int64_t>(DType::I64, {1}, {s.axis}));
    Op sq;
    sq.type = "Squeeze";
    sq.name = op.name + ".squeeze" + std::to_string(k);
    sq.inputs = {partId, axes};
    sq.outputs = {target};
    squeezes.push_back(std::move(sq));
  }
  ops.push_back(std::move(split));
  for (Op &sq : squeezes) ops.push_back(std::move(sq));
  return ops;
}

} // namespace

llvm::Error lowerSequences(Graph &g, const PassOptions &) {
  auto users = g.computeUsers();
  std::vector<bool> removed(g.ops.size(), false);
  std::map<int32_t, std::vector<Op>> replacements;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].dead || g.ops[i].type != "SplitToSequence") continue;
    auto l = planLowering(g, int32_t(i), users, removed);
    if (!l) return l.takeError();
    replacements[int32_t(i)] = lowerToSplit(g, g.ops[i], *l);
  }
  // A sequence op that survives was fed by something other than SplitToSequence.
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (!g.ops[i].dead && !removed[i] && !replacements.count(int32_t(i)) &&
        (g.ops[i].type == "SequenceAt" || g.ops[i].type == "SequenceLength"))
      return opError(g, g.ops[i], "its sequence is not made by SplitToSequence; megac cannot lower it");
  if (replacements.empty()) return llvm::Error::success();
  std::vector<Op> ops;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].dead || removed[i]) continue;
    auto r = replacements.find(int32_t(i));
    if (r == replacements.end()) {
      ops.push_back(std::move(g.ops[i]));
      continue;
    }
    for (Op &op : r->second) ops.push_back(std::move(op));
  }
  g.ops = std::move(ops);
  for (Value &v : g.values)
    if (v.kind == ValueKind::Const) v.producer = -1;
  g.recomputeProducers();
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
