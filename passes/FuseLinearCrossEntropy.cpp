// fuse-linear-cross-entropy: rewrites the LM head's product feeding the loss,
//     logits = MatMul(h, W)  |  Gemm(h, W) {transB}
//     loss = megac.SoftmaxCrossEntropy(logits, targets)
// into loss = megac.LinearCrossEntropy(h, W, targets) {ignore_index, trans_w},
// whose kernels compute the logits a chunk of rows at a time: the fp32
// [tokens, vocab] logits (and their gradient) never exist whole. Only when
// nothing else reads the logits. A weight transposed by Transpose(perm [1, 0])
// that feeds only the product (gpt2's head tied to the embedding) is read
// as stored, with trans_w = 1. Structure only: no names are looked at.
#include "passes/Pass.h"

namespace megac::passes {

using namespace ir;

namespace {

bool isGraphOutput(const Graph &g, ValueId v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

// The live op producing v if it has type `type`, else -1.
int32_t producerOf(const Graph &g, ValueId v, llvm::StringRef type) {
  if (v == kNoValue) return -1;
  int32_t p = g.value(v).producer;
  if (p < 0 || g.ops[size_t(p)].dead || g.ops[size_t(p)].type != type) return -1;
  return p;
}

// Whether `user` is the only live reader of v (and v is no graph output).
bool onlyUser(const Graph &g, const std::vector<std::vector<int32_t>> &users, ValueId v, int32_t user) {
  if (isGraphOutput(g, v)) return false;
  for (int32_t u : users[size_t(v)])
    if (u != user && !g.ops[size_t(u)].dead) return false;
  return true;
}

struct Head {
  int32_t product = -1; // the MatMul/Gemm
  ValueId h = kNoValue, w = kNoValue;
  bool transW = false;
};

// The head product behind `logits`, when it is one the fused op computes:
// h [..., H] times a 2-D W, no bias, no scaling, h not transposed.
std::optional<Head> matchProduct(const Graph &g, ValueId logits) {
  Head m;
  if ((m.product = producerOf(g, logits, "MatMul")) < 0 && (m.product = producerOf(g, logits, "Gemm")) < 0)
    return std::nullopt;
  const Op &p = g.ops[size_t(m.product)];
  if (p.inputs.size() < 2 || p.inputs[0] == kNoValue || p.inputs[1] == kNoValue) return std::nullopt;
  if (p.type == "Gemm") {
    if (p.inputs.size() > 2 && p.inputs[2] != kNoValue) return std::nullopt; // a bias
    if (p.attrs.getInt("transA", 0) != 0 || p.attrs.getFloat("alpha", 1.0f) != 1.0f) return std::nullopt;
    m.transW = p.attrs.getInt("transB", 0) != 0;
  }
  m.h = p.inputs[0];
  m.w = p.inputs[1];
  const TensorType &ht = g.type(m.h), &wt = g.type(m.w);
  if (!ht.known() || !wt.known() || ht.shape.size() < 2 || wt.shape.size() != 2 || !isFloatType(ht.dtype) ||
      wt.dtype != ht.dtype)
    return std::nullopt;
  return m;
}

} // namespace

llvm::Error fuseLinearCrossEntropy(Graph &g, const PassOptions &) {
  auto users = g.computeUsers();
  bool changed = false;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].dead || g.ops[i].type != "megac.SoftmaxCrossEntropy" || g.ops[i].inputs.size() != 2) continue;
    ValueId logits = g.ops[i].inputs[0];
    if (!onlyUser(g, users, logits, int32_t(i))) continue;
    std::optional<Head> m = matchProduct(g, logits);
    if (!m) continue;
    // Read a transposed weight as stored (the Transpose's gradient rule is
    // then not needed: dW comes out in the stored layout).
    int32_t tr = producerOf(g, m->w, "Transpose");
    if (tr >= 0 && onlyUser(g, users, m->w, m->product)) {
      const Op &t = g.ops[size_t(tr)];
      std::vector<int64_t> perm = t.attrs.getInts("perm", {1, 0});
      if (t.inputs.size() == 1 && perm == std::vector<int64_t>{1, 0}) {
        m->w = t.inputs[0];
        m->transW = !m->transW;
        g.ops[size_t(tr)].dead = true;
      }
    }
    Op &loss = g.ops[i];
    loss.type = "megac.LinearCrossEntropy";
    loss.inputs = {m->h, m->w, loss.inputs[1]};
    loss.attrs.set("trans_w", Attr::ofInt(m->transW ? 1 : 0));
    g.ops[size_t(m->product)].dead = true;
    changed = true;
  }
  if (changed) g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
