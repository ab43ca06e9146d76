// simplify-attention-masks: an Attention op (as exported at opset 23, or as
// fuse-attention made it) whose attn_mask is known at compile time and is the
// causal pattern gets is_causal = 1 instead; one that masks nothing is
// dropped. Runtimes then take their causal kernels (cuDNN's fused attention
// on the GPU) rather than read a [..., S, S] mask, and a mask too large to
// fold (specialize leaves a causal mask at seq 32768 as ops: 2^30 entries) is
// never materialized. Read through passes/AttentionMask.h. The op changes
// only where the result is the same: no past cache (queries and keys align),
// and no qk_matmul_output, which would show the mask.
#include "passes/AttentionMask.h"
#include "passes/Match.h"
#include "passes/Pass.h"
#include "runtime/cpu/NormAttentionShapes.h"

namespace megac::passes {

using namespace ir;

namespace {

constexpr size_t kMaskInput = 3, kPastKeyInput = 4, kPastValueInput = 5;

// Whether op's mask could be simplified, and how; false where it is left.
bool simplify(Graph &g, Op &op, MaskFactsCache &masks, const PassOptions &opts) {
  if (!hasInput(op, kMaskInput) || hasInput(op, kPastKeyInput) || hasInput(op, kPastValueInput)) return false;
  if (op.outputs.size() > 3 && op.outputs[3] != kNoValue) return false;
  Shape q = g.type(op.inputs[0]).shape, k = g.type(op.inputs[1]).shape, v = g.type(op.inputs[2]).shape,
        m = g.type(op.inputs[kMaskInput]).shape;
  cpu::AttentionInputShapes in;
  in.q = &q, in.k = &k, in.v = &v, in.mask = &m;
  auto d = cpu::attentionDims(op.attrs, in);
  if (!d) {
    llvm::consumeError(d.takeError());
    return false;
  }
  const ValueId mask = op.inputs[kMaskInput];
  const MaskKind kind{g.type(mask).dtype == DType::Bool};
  auto facts = masks.get(g, mask, kind, d->qSeq, d->totalSeq, opts);
  if (!facts || !(facts->allVisible || (facts->causal && d->qSeq == d->totalSeq))) return false;
  if (!facts->allVisible) op.attrs.set("is_causal", Attr::ofInt(1));
  op.inputs[kMaskInput] = kNoValue;
  while (!op.inputs.empty() && op.inputs.back() == kNoValue) op.inputs.pop_back();
  return true;
}

} // namespace

llvm::Error simplifyAttentionMasks(Graph &g, const PassOptions &opts) {
  bool changed = false;
  MaskFactsCache masks;
  for (Op &op : g.ops)
    if (!op.dead && op.type == "Attention") changed |= simplify(g, op, masks, opts);
  if (changed) {
    markUnusedOpsDead(g, g.outputs);
    g.compact();
  }
  return llvm::Error::success();
}

} // namespace megac::passes
