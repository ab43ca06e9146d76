// fuse-linear-cross-entropy: rewrites the LM head's product feeding the loss,
//     logits = MatMul(h, W)  |  Gemm(h, W) {transB}
//     loss = megac.SoftmaxCrossEntropy(logits, targets)
// into loss = megac.LinearCrossEntropy(h, W, targets) {ignore_index, trans_w},
// whose kernels compute the logits a chunk of rows at a time: the fp32
// [tokens, vocab] logits (and their gradient) never exist whole. Only when
// nothing else reads the logits. A weight transposed by Transpose(perm [1, 0])
// that feeds only the product (gpt2's head tied to the embedding) is read
// as stored, with trans_w = 1. Structure only: no names are looked at.
#include "passes/Match.h"
#include "passes/Pass.h"

namespace megac::passes {

using namespace ir;

namespace {

struct Head {
  const Op *product = nullptr; // the MatMul/Gemm
  ValueId h = kNoValue, w = kNoValue;
  bool transW = false;
};

// The head product behind `logits`, when it is one the fused op computes:
// h [..., H] times a 2-D W, no bias, no scaling, h not transposed.
std::optional<Head> matchProduct(const Matcher &mt, ValueId logits) {
  Head m;
  m.product = mt.def(logits);
  if (!m.product || (m.product->type != "MatMul" && m.product->type != "Gemm")) return std::nullopt;
  const Op &p = *m.product;
  if (p.inputs.size() < 2 || p.inputs[0] == kNoValue || p.inputs[1] == kNoValue) return std::nullopt;
  if (p.type == "Gemm") {
    if (p.inputs.size() > 2 && p.inputs[2] != kNoValue) return std::nullopt; // a bias
    if (p.attrs.getInt("transA", 0) != 0 || p.attrs.getFloat("alpha", 1.0f) != 1.0f) return std::nullopt;
    m.transW = p.attrs.getInt("transB", 0) != 0;
  }
  m.h = p.inputs[0];
  m.w = p.inputs[1];
  const TensorType &ht = mt.type(m.h), &wt = mt.type(m.w);
  if (!ht.known() || !wt.known() || ht.shape.size() < 2 || wt.shape.size() != 2 || !isFloatType(ht.dtype) ||
      wt.dtype != ht.dtype)
    return std::nullopt;
  return m;
}

} // namespace

llvm::Error fuseLinearCrossEntropy(Graph &g, const PassOptions &) {
  Matcher mt(g);
  bool changed = false;
  for (Op &loss : g.ops) {
    if (loss.dead || loss.type != "megac.SoftmaxCrossEntropy" || loss.inputs.size() != 2) continue;
    ValueId logits = loss.inputs[0];
    if (!mt.onlyUsedBy(logits, &loss)) continue;
    std::optional<Head> m = matchProduct(mt, logits);
    if (!m) continue;
    // Read a transposed weight as stored (the Transpose's gradient rule is
    // then not needed: dW comes out in the stored layout).
    const Op *tr = mt.def(m->w);
    if (tr && tr->type == "Transpose" && mt.onlyUsedBy(m->w, m->product)) {
      std::vector<int64_t> perm = tr->attrs.getInts("perm", {1, 0});
      if (tr->inputs.size() == 1 && perm == std::vector<int64_t>{1, 0}) {
        m->w = tr->inputs[0];
        m->transW = !m->transW;
      }
    }
    loss.type = "megac.LinearCrossEntropy";
    loss.inputs = {m->h, m->w, loss.inputs[1]};
    loss.attrs.set("trans_w", Attr::ofInt(m->transW ? 1 : 0));
    changed = true;
  }
  if (!changed) return llvm::Error::success();
  markUnusedOpsDead(g, g.outputs); // the product (and the Transpose) now feed nothing
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
