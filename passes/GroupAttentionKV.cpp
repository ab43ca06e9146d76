// group-attention-kv: an Attention whose K and V are written out to as many
// heads as Q by transformers' repeat_kv,
//     k = Reshape(Expand(Unsqueeze(k1, 2), [B, kvH, n, S, D]), [B, kvH * n, S, D])
// (and V alike, by the same n), reads k1 and v1 instead: Attention groups
// the query heads itself (GQA), so the n-fold copies of K and V, and of
// their gradients, are never made. Opset-23 exports write such an Attention
// directly; fuse-attention does the same for the products it fuses. Only
// without a past cache and with present_key/present_value unused.
#include "passes/Match.h"
#include "passes/Pass.h"

namespace megac::passes {

using namespace ir;

llvm::Error groupAttentionKV(Graph &g, const PassOptions &) {
  struct Grouped {
    size_t op;
    ValueId k, v;
  };
  std::vector<Grouped> found;
  {
    Matcher mt(g);
    auto unused = [&](const Op &op, size_t i) {
      return i >= op.outputs.size() || op.outputs[i] == kNoValue ||
             (mt.users(op.outputs[i]).empty() && !mt.isOutput(op.outputs[i]));
    };
    for (size_t i = 0; i < g.ops.size(); ++i) {
      const Op &op = g.ops[i];
      if (op.dead || op.type != "Attention" || op.inputs.size() < 3) continue;
      if (hasInput(op, 4) || hasInput(op, 5)) continue; // past_key, past_value
      if (!unused(op, 1) || !unused(op, 2)) continue;
      const ValueId k = op.inputs[1], v = op.inputs[2];
      if (k == kNoValue || v == kNoValue || mt.shape(k).size() != 4 || mt.shape(v).size() != 4) continue;
      const ValueId k1 = mt.unrepeatedKV(k), v1 = mt.unrepeatedKV(v);
      if (k1 == k || v1 == v || mt.shape(k1)[1] != mt.shape(v1)[1]) continue;
      found.push_back({i, k1, v1});
    }
  }
  if (found.empty()) return llvm::Error::success();
  for (const Grouped &f : found) {
    g.ops[f.op].inputs[1] = f.k;
    g.ops[f.op].inputs[2] = f.v;
  }
  markUnusedOpsDead(g, g.outputs); // the repeats
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
