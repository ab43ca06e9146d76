// fold-head-transposes: gives Attention its 3-D form ([B, S, heads * D]
// operands and result, q_num_heads / kv_num_heads set) where the model
// splits and merges heads with transposes around it, as exported
// transformers do:
//     q = Transpose(t) {perm = [0, 2, 1, 3]}         t: [B, S, H, D]
//     q = RotaryEmbedding(Transpose(t), cos, sin)    (4-D rotary between)
//     y = Attention(q, k, v[, mask])                 y: [B, H, S, Dv]
//     u = Transpose(y) {perm = [0, 2, 1, 3]}         every user of y (or of an
//                                                    Identity or same-shape Reshape of y)
// becomes
//     q = Reshape(t, [B, S, H * D])                  (t's own 3-D source if t is a Reshape of one)
//     q = RotaryEmbedding(Reshape(t, ...), cos, sin) {num_heads = H}
//     y = Attention(q, k, v[, mask]) {q_num_heads, kv_num_heads}
//     u = Reshape(y, [B, S, H, Dv])
// The Reshapes are views (the memory plan shares their bytes), so the four
// transposes of each layer's forward, four more in its gradient and those of
// the recomputed forward copy nothing; cuDNN reads the [B, S, H, D] layout
// by strides. Only when all of Q, K and V have that form, nothing reads Y
// but such Transposes, and the op has no past cache, nonpad_kv_seqlen or
// output besides Y in use. Structure only: no names are looked at.
#include "passes/Match.h"
#include "passes/Pass.h"

namespace megac::passes {

using namespace ir;

namespace {

const std::vector<int64_t> kSwapHeadsAndSeq = {0, 2, 1, 3};

// One of Q, K, V as its 3-D source: t [B, S, H, D], read through an
// optional rotary.
struct HeadOperand {
  ValueId t = kNoValue;
  int32_t rotary = -1; // the op index of a 4-D RotaryEmbedding between, if any
};

struct HeadMatch {
  int32_t attention = -1;
  HeadOperand qkv[3];
  std::vector<int32_t> outputTransposes; // every user of Y
};

class HeadMatcher {
public:
  explicit HeadMatcher(Graph &g) : g_(g), mt_(g) {}

  std::optional<HeadMatch> match(int32_t at) {
    const Op &att = g_.ops[size_t(at)];
    if (att.inputs.size() < 3 || att.outputs.empty()) return std::nullopt;
    for (size_t i = 4; i < att.inputs.size(); ++i)
      if (hasInput(att, i)) return std::nullopt; // past cache, nonpad_kv_seqlen
    for (size_t i = 1; i < att.outputs.size(); ++i)
      if (att.outputs[i] != kNoValue && (!mt_.users(att.outputs[i]).empty() || mt_.isOutput(att.outputs[i])))
        return std::nullopt;
    HeadMatch m;
    m.attention = at;
    for (size_t i = 0; i < 3; ++i) {
      auto o = headOperand(att.inputs[i], &att);
      if (!o) return std::nullopt;
      m.qkv[i] = *o;
    }
    const ValueId y = att.outputs[0];
    if (y == kNoValue || mt_.isOutput(y) || mt_.shape(y).size() != 4) return std::nullopt;
    if (!collectOutputTransposes(y, m.outputTransposes) || m.outputTransposes.empty()) return std::nullopt;
    return m;
  }

private:
  // Every reader of v is a head-merging Transpose, or a view that keeps v's
  // shape (Identity, a Reshape to the same shape, as newer exporters write
  // before the transpose) whose readers are. The views are left unread by
  // the rewrite, and dead.
  bool collectOutputTransposes(ValueId v, std::vector<int32_t> &out) const {
    if (mt_.isOutput(v)) return false;
    for (int32_t u : mt_.users(v)) {
      const Op &t = g_.ops[size_t(u)];
      if (t.type == "Transpose" && t.inputs.size() == 1 && t.attrs.getInts("perm", {}) == kSwapHeadsAndSeq) {
        out.push_back(u);
        continue;
      }
      const bool sameShapeView = (t.type == "Identity" || t.type == "Reshape") && !t.inputs.empty() &&
                                 t.inputs[0] == v && t.outputs.size() == 1 && t.outputs[0] != kNoValue &&
                                 mt_.type(t.outputs[0]).known() && mt_.shape(t.outputs[0]) == mt_.shape(v);
      if (!sameShapeView || !collectOutputTransposes(t.outputs[0], out)) return false;
    }
    return true;
  }

  // v [B, H, S, D] = Transpose(t) {perm [0, 2, 1, 3]}: t.
  ValueId headsFirst(ValueId v) const {
    const Op *t = mt_.defOf(v, "Transpose", 1);
    if (!t || t->attrs.getInts("perm", {}) != kSwapHeadsAndSeq) return kNoValue;
    const TensorType &tt = mt_.type(t->inputs[0]);
    return tt.known() && tt.shape.size() == 4 ? t->inputs[0] : kNoValue;
  }

  std::optional<HeadOperand> headOperand(ValueId v, const Op *att) const {
    if (v == kNoValue || !mt_.type(v).known() || mt_.shape(v).size() != 4) return std::nullopt;
    HeadOperand o;
    o.t = headsFirst(v);
    if (o.t != kNoValue) return o;
    const Op *r = mt_.def(v);
    if (!r || r->type != "RotaryEmbedding" || r->inputs.size() < 3 || r->outputs.size() != 1 ||
        !mt_.onlyUsedBy(v, att))
      return std::nullopt;
    o.t = headsFirst(r->inputs[0]);
    if (o.t == kNoValue) return std::nullopt;
    o.rotary = g_.value(v).producer;
    return o;
  }

  Graph &g_;
  Matcher mt_;
};

class Rewriter {
public:
  Rewriter(Graph &g, const HeadMatch &m) : g_(g), m_(m) {
    const Op &att = g.ops[size_t(m.attention)];
    base_ = att.name.empty() ? g.value(att.outputs[0]).name : att.name;
  }

  // In place: each Transpose of Y becomes a Reshape of the 3-D Y. Touches no
  // op index, so it may run for every match before any insertion.
  void rewriteOutputs() {
    const Op &att = g_.ops[size_t(m_.attention)];
    const Shape ys = g_.type(att.outputs[0]).shape; // [B, H, S, Dv]
    const Shape bshd{ys[0], ys[2], ys[1], ys[3]};
    y3_ = newValue(g_.value(att.outputs[0]).name + "_bshd", {ys[0], ys[2], ys[1] * ys[3]});
    for (int32_t u : m_.outputTransposes) {
      Op &t = g_.ops[size_t(u)];
      Op r;
      r.type = "Reshape";
      r.name = t.name;
      r.inputs = {y3_, shapeConst(g_, t.name + "/heads", bshd)};
      r.outputs = t.outputs;
      t = std::move(r);
    }
  }

  // Replaces the Attention by the 3-D operands' ops and the 3-D Attention.
  void rewriteAttention() {
    Op att = g_.ops[size_t(m_.attention)];
    std::vector<Op> before;
    for (size_t i = 0; i < 3; ++i) att.inputs[i] = threeD(m_.qkv[i], before);
    att.attrs.set("q_num_heads", Attr::ofInt(g_.type(m_.qkv[0].t).shape[2]));
    att.attrs.set("kv_num_heads", Attr::ofInt(g_.type(m_.qkv[1].t).shape[2]));
    att.outputs = {y3_};
    size_t at = size_t(m_.attention);
    for (Op &op : before) g_.insertOp(at++, std::move(op));
    g_.ops[at] = std::move(att);
  }

private:
  ValueId newValue(const std::string &hint, Shape s) {
    Value v;
    v.name = hint;
    v.type = TensorType{g_.type(g_.ops[size_t(m_.attention)].outputs[0]).dtype, std::move(s), false};
    return g_.addValueUnique(std::move(v));
  }

  // The operand in [B, S, H * D], with the ops computing it appended to `ops`.
  ValueId threeD(const HeadOperand &o, std::vector<Op> &ops) {
    const Shape ts = g_.type(o.t).shape; // [B, S, H, D]
    const Shape s3{ts[0], ts[1], ts[2] * ts[3]};
    ValueId x = o.t;
    const Op *src = g_.value(o.t).producer >= 0 ? &g_.ops[size_t(g_.value(o.t).producer)] : nullptr;
    if (src && !src->dead && src->type == "Reshape" && !src->inputs.empty() && g_.type(src->inputs[0]).shape == s3) {
      x = src->inputs[0];
    } else {
      Op r;
      r.type = "Reshape";
      r.name = base_ + "/bshd";
      r.inputs = {o.t, shapeConst(g_, base_ + "/bshd_shape", s3)};
      r.outputs = {newValue(g_.value(o.t).name + "_bshd", s3)};
      x = r.outputs[0];
      ops.push_back(std::move(r));
    }
    if (o.rotary < 0) return x;
    Op rot = g_.ops[size_t(o.rotary)];
    rot.inputs[0] = x;
    rot.attrs.set("num_heads", Attr::ofInt(ts[2]));
    rot.outputs = {newValue(g_.value(rot.outputs[0]).name + "_bshd", s3)};
    ValueId out = rot.outputs[0];
    ops.push_back(std::move(rot));
    return out;
  }

  Graph &g_;
  const HeadMatch &m_;
  std::string base_;
  ValueId y3_ = kNoValue;
};

} // namespace

llvm::Error foldHeadTransposes(Graph &g, const PassOptions &) {
  std::vector<HeadMatch> matches;
  {
    HeadMatcher matcher(g);
    for (size_t i = 0; i < g.ops.size(); ++i)
      if (!g.ops[i].dead && g.ops[i].type == "Attention")
        if (auto m = matcher.match(int32_t(i))) matches.push_back(std::move(*m));
  }
  if (matches.empty()) return llvm::Error::success();
  std::vector<Rewriter> rewriters;
  for (const HeadMatch &m : matches) rewriters.emplace_back(g, m);
  for (Rewriter &r : rewriters) r.rewriteOutputs();
  // Back to front: inserting before one Attention leaves earlier indices be.
  for (size_t i = rewriters.size(); i-- > 0;) rewriters[i].rewriteAttention();
  g.recomputeProducers();
  markUnusedOpsDead(g, g.outputs); // the 4-D transposes and rotaries
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
