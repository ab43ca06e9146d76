// fuse-swiglu: rewrites the gated SiLU of Llama-style MLPs written as
// separate ops,
//     y = Mul(Mul(g, Sigmoid(g)), u)      (any operand order)
// into megac.SwiGLU(g, u), one elementwise kernel forward and one
// (megac.SwiGLUGrad) backward instead of three and about ten. g and u must
// be float tensors of the result's type (no broadcasting), and the Sigmoid
// and the SiLU product must be used by the chain alone; anything else stays.
#include "passes/Match.h"
#include "passes/Pass.h"

namespace megac::passes {

using namespace ir;

namespace {

struct SwiGLUMatch {
  ValueId y = kNoValue, gate = kNoValue, up = kNoValue;
};

// silu = Mul(g, Sigmoid(g)) in either order, used by `user` alone: g.
ValueId siluInput(Matcher &m, ValueId silu, const Op *user) {
  const Op *mul = m.defOf(silu, "Mul", 2);
  if (!mul || !m.onlyUsedBy(silu, user)) return kNoValue;
  for (int side : {0, 1}) {
    ValueId g = mul->inputs[size_t(side)], s = mul->inputs[size_t(1 - side)];
    const Op *sig = m.defOf(s, "Sigmoid", 1);
    if (sig && sig->inputs[0] == g && s != g && m.onlyUsedBy(s, mul) && m.type(g) == m.type(silu)) return g;
  }
  return kNoValue;
}

std::optional<SwiGLUMatch> match(Matcher &m, const Op &mul) {
  if (mul.type != "Mul" || mul.inputs.size() != 2 || mul.outputs.size() != 1) return std::nullopt;
  SwiGLUMatch r;
  r.y = mul.outputs[0];
  const TensorType &yt = m.type(r.y);
  if (!isFloatType(yt.dtype)) return std::nullopt;
  for (int side : {0, 1}) {
    ValueId silu = mul.inputs[size_t(side)], up = mul.inputs[size_t(1 - side)];
    if (silu == kNoValue || up == kNoValue || silu == up || m.type(silu) != yt || m.type(up) != yt) continue;
    ValueId g = siluInput(m, silu, &mul);
    if (g == kNoValue) continue;
    r.gate = g;
    r.up = up;
    return r;
  }
  return std::nullopt;
}

} // namespace

llvm::Error fuseSwiGLU(Graph &g, const PassOptions &) {
  std::vector<SwiGLUMatch> matches;
  {
    Matcher m(g);
    for (const Op &op : g.ops)
      if (!op.dead && op.type == "Mul")
        if (auto r = match(m, op)) matches.push_back(*r);
  }
  if (matches.empty()) return llvm::Error::success();
  for (const SwiGLUMatch &r : matches) {
    Op fused;
    fused.type = "megac.SwiGLU";
    fused.inputs = {r.gate, r.up};
    fused.outputs = {r.y};
    replaceProducer(g, r.y, std::move(fused));
  }
  markUnusedOpsDead(g, g.outputs);
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
