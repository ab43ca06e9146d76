// fuse-attention: rewrites attention written as separate ops,
//     P = Softmax(scale * Q K^T + mask, axis = -1);  Y = P V
// into one ONNX Attention (opset 23 semantics), so that the runtimes run a
// fused kernel forward and backward instead of materializing the scores
// through five ops. Recognized forms, all on 4-D [batch, heads, seq, dim]:
// - the scale as Mul/Div by scalar constants on the scores, on Q and/or on K
//   (torch's sdpa decomposition scales both by sqrt(scale));
// - K^T as a Transpose (any 4-D perm, composed with the swap) or as
//   reshapes of the batch dims around a swap of the last two (sdpa);
// - K and V repeated per head group (repeat_kv: Unsqueeze/Expand/Reshape):
//   Attention takes the un-repeated tensors and does GQA itself;
// - the mask as Add of a constant (a causal pattern becomes is_causal = 1,
//   all zeros is dropped, anything else is attn_mask) or as
//   Where(constant bool, scores, fill <= -1e30);
// - no-op Identity / same-dtype Cast ops and the sdpa NaN guard
//   Where(IsNaN(P), 0, P) between the softmax and the product.
// Anything else stays as it is: the rewrite happens only when the result is
// the same function (up to rounding): static shapes, a positive finite scale,
// softmax over the last axis, and scores and probabilities used by nothing
// else. The kernel sets a row whose keys are all masked to 0 where the
// softmax gives NaN, so a constant mask with such a row is fused only under
// the NaN guard. The ops left without users are removed.
#include "ir/OpSchema.h"
#include "passes/AttentionMask.h"
#include "passes/Match.h"
#include "passes/Pass.h"
#include "runtime/cpu/NormAttentionShapes.h"

#include <cmath>
#include <numeric>
#include <optional>

namespace megac::passes {

using namespace ir;

namespace {

struct AttentionMatch {
  ValueId y = kNoValue; // the P V product's result, which Attention takes over
  ValueId q = kNoValue, k = kNoValue, v = kNoValue;
  std::vector<int64_t> kPerm;    // non-empty: K is Transpose(k, kPerm)
  ValueId mask = kNoValue;       // an existing constant
  std::optional<Tensor> newMask; // a constant to create (an inverted bool mask)
  bool causal = false;
  double scale = 1;
};

bool isFloat32Or64(DType t) { return t == DType::F32 || t == DType::F64; }

Shape transposed(const Shape &s, const std::vector<int64_t> &perm) {
  Shape out;
  for (int64_t p : perm) out.push_back(s[size_t(p)]);
  return out;
}

class AttentionMatcher {
public:
  AttentionMatcher(Graph &g, const PassOptions &opts)
      : g_(g), opts_(opts), mt_(g) {}

  // The fusion of the P V product at op index pv, if its inputs are attention.
  std::optional<AttentionMatch> match(int32_t pv);

private:
  const Op *def(ValueId v) const {
    if (v == kNoValue) return nullptr;
    int32_t p = g_.value(v).producer;
    if (p < 0 || g_.ops[size_t(p)].dead) return nullptr;
    return &g_.ops[size_t(p)];
  }
  int32_t defIndex(ValueId v) const { return g_.value(v).producer; }
  // The constant behind Expand(constant, shape) (specialize leaves a mask too
  // large to fold that way): broadcasting it is what the Expand did.
  ValueId throughBroadcast(ValueId v) {
    const Op *op = def(v);
    if (op && op->type == "Expand" && !op->inputs.empty() && g_.constValue(op->inputs[0])) return op->inputs[0];
    return v;
  }
  const Shape &shape(ValueId v) const { return g_.type(v).shape; }
  // v feeds op `user` and nothing else (not a graph output either).
  bool onlyUsedBy(ValueId v, int32_t user) const {
    return !mt_.isOutput(v) && mt_.users(v).size() == 1 && mt_.users(v)[0] == user;
  }
  // A float constant with one element, as a double.
  std::optional<double> scalarConst(ValueId v) {
    const Tensor *t = v == kNoValue ? nullptr : g_.constValue(v);
    if (!t || t->numel() != 1 || !isFloatType(t->dtype())) return std::nullopt;
    return t->getAsDouble(0);
  }
  // If op is x * c, c * x or x / c with c a scalar constant that does not
  // broadcast x: x, and the factor.
  std::optional<std::pair<ValueId, double>> scalarFactor(const Op &op) {
    if ((op.type != "Mul" && op.type != "Div") || op.inputs.size() != 2) return std::nullopt;
    for (int side : {1, 0}) {
      if (side == 0 && op.type == "Div") break;
      ValueId x = op.inputs[size_t(1 - side)];
      auto c = scalarConst(op.inputs[size_t(side)]);
      if (!c || g_.type(x) != g_.type(op.outputs[0])) continue;
      return std::make_pair(x, op.type == "Div" ? 1.0 / *c : *c);
    }
    return std::nullopt;
  }
  // Follows no-ops and scalar Mul/Div back from v (on Q or K, where other
  // users do not matter), multiplying factor.
  ValueId throughScalars(ValueId v, double &factor) {
    while (const Op *op = def(v)) {
      if (mt_.isNoOp(*op)) {
        v = op->inputs[0];
      } else if (auto f = scalarFactor(*op)) {
        factor *= f->second;
        v = f->first;
      } else {
        break;
      }
    }
    return v;
  }

  bool probabilities(ValueId p, int32_t user, int32_t &softmax, bool &guarded);
  bool scores(ValueId x, int32_t user, AttentionMatch &m, int32_t &qk, bool &guardNeeded);
  bool maskFromAdd(ValueId mask, const Shape &scores, DType dtype, AttentionMatch &m, bool &guardNeeded);
  bool maskFromWhere(const Op &where, const Shape &scores, AttentionMatch &m, bool &guardNeeded);
  std::optional<std::pair<ValueId, std::vector<int64_t>>> untransposed(ValueId kt, const Shape &want);

  Graph &g_;
  const PassOptions &opts_;
  Matcher mt_;
  MaskFactsCache masks_;
};

// Back from the P of P V to the Softmax over the last axis, through no-ops
// and the NaN guard, each result used only by the next op.
bool AttentionMatcher::probabilities(ValueId p, int32_t user, int32_t &softmax, bool &guarded) {
  guarded = false;
  for (;;) {
    const Op *op = def(p);
    if (!op || !onlyUsedBy(p, user)) return false;
    int32_t idx = defIndex(p);
    if (mt_.isNoOp(*op)) {
      p = op->inputs[0], user = idx;
      continue;
    }
    if (op->type == "Where" && op->inputs.size() == 3 && !guarded) {
      // Where(IsNaN(s), 0, s): s feeds exactly the IsNaN and this Where.
      ValueId s = op->inputs[2];
      const Op *isNan = def(op->inputs[0]);
      auto zero = scalarConst(op->inputs[1]);
      if (!isNan || isNan->type != "IsNaN" || isNan->inputs[0] != s || !zero || *zero != 0) return false;
      if (!onlyUsedBy(op->inputs[0], idx) || mt_.isOutput(s) || mt_.users(s).size() != 2) return false;
      for (int32_t u : mt_.users(s))
        if (u != idx && u != defIndex(op->inputs[0])) return false;
      if (g_.type(s) != g_.type(p)) return false;
      guarded = true;
      const Op *sm = def(s);
      if (!sm || sm->type != "Softmax") return false;
      softmax = defIndex(s);
      break;
    }
    if (op->type != "Softmax") return false;
    softmax = idx;
    break;
  }
  const Op &sm = g_.ops[size_t(softmax)];
  int64_t axis = sm.attrs.getInt("axis", -1);
  return axis == -1 || axis == 3;
}

// An additive mask of the scores' dtype known at compile time: dropped where
// it masks nothing, is_causal where it is the causal pattern, else kept (a
// constant; a mask too large to fold is then left unfused).
bool AttentionMatcher::maskFromAdd(ValueId mask, const Shape &scores, DType dtype, AttentionMatch &m,
                                   bool &guardNeeded) {
  const TensorType &t = g_.type(mask);
  if (t.dtype != dtype || t.shape.empty() || t.shape.size() > 4 || t.shape.back() != scores[3]) return false;
  auto facts = masks_.get(g_, mask, MaskKind{false}, scores[2], scores[3], opts_);
  if (!facts) return false;
  if (facts->allVisible) return true;
  if (facts->causal) {
    m.causal = true;
    return true;
  }
  mask = throughBroadcast(mask);
  if (!g_.constValue(mask)) return false;
  guardNeeded = facts->fullyMaskedRow;
  m.mask = mask;
  return true;
}

// Where(keep, scores, fill) or Where(drop, fill, scores) with a bool
// condition known at compile time and a fill that makes exp() vanish: a bool
// keep-mask, read as maskFromAdd reads its mask.
bool AttentionMatcher::maskFromWhere(const Op &where, const Shape &scores, AttentionMatch &m, bool &guardNeeded) {
  const TensorType &ct = g_.type(where.inputs[0]);
  if (ct.dtype != DType::Bool || ct.shape.empty() || ct.shape.size() > 4 || ct.shape.back() != scores[3]) return false;
  const bool inverted = g_.type(where.inputs[1]).shape != scores;
  auto fill = scalarConst(where.inputs[inverted ? 1 : 2]);
  if (!fill || !(*fill <= kMaskedBound)) return false;
  auto facts = masks_.get(g_, where.inputs[0], MaskKind{true, inverted}, scores[2], scores[3], opts_);
  if (!facts) return false;
  if (facts->allVisible) return true;
  if (facts->causal) {
    m.causal = true;
    return true;
  }
  const ValueId condValue = throughBroadcast(where.inputs[0]);
  const Tensor *cond = g_.constValue(condValue);
  if (!cond) return false;
  if (facts->fullyMaskedRow) {
    // The softmax of a row of finite fills is uniform, not 0 or NaN.
    if (*fill != -INFINITY) return false;
    guardNeeded = true;
  }
  if (inverted) {
    Tensor keep = cond->clone();
    for (int64_t i = 0; i < keep.numel(); ++i) keep.setFromDouble(i, keep.getAsDouble(i) == 0 ? 1 : 0);
    m.newMask = std::move(keep);
  } else {
    m.mask = condValue;
  }
  return true;
}

// Back from the softmax's input to the Q K^T MatMul: no-ops, one mask (Add
// or Where) and then scalar factors, each result used only by the next op.
bool AttentionMatcher::scores(ValueId x, int32_t user, AttentionMatch &m, int32_t &qk, bool &guardNeeded) {
  const Shape want = shape(x);
  if (want.size() != 4) return false;
  bool maskSeen = false, scaleSeen = false;
  for (;;) {
    const Op *op = def(x);
    if (!op || !onlyUsedBy(x, user) || op->outputs.size() != 1) return false;
    int32_t idx = defIndex(x);
    if (mt_.isNoOp(*op)) {
      x = op->inputs[0], user = idx;
      continue;
    }
    if (op->type == "MatMul") {
      qk = idx;
      return true;
    }
    if (auto f = scalarFactor(*op)) {
      m.scale *= f->second;
      scaleSeen = true;
      x = f->first, user = idx;
      continue;
    }
    // A mask applied after a scale would need scaling itself.
    if (maskSeen || scaleSeen || shape(op->outputs[0]) != want) return false;
    maskSeen = true;
    if (op->type == "Add" && op->inputs.size() == 2) {
      // The scores are the operand with the full shape that leads to the
      // product; try each side.
      bool found = false;
      for (int side : {0, 1}) {
        ValueId s = op->inputs[size_t(side)], mask = op->inputs[size_t(1 - side)];
        if (g_.type(s) != g_.type(x)) continue;
        AttentionMatch trial = m;
        bool need = false;
        if (!maskFromAdd(mask, want, g_.type(x).dtype, trial, need)) continue;
        m = trial;
        guardNeeded = need;
        x = s;
        found = true;
        break;
      }
      if (!found) return false;
    } else if (op->type == "Where" && op->inputs.size() == 3) {
      if (!maskFromWhere(*op, want, m, guardNeeded)) return false;
      x = g_.type(op->inputs[1]).shape == want ? op->inputs[1] : op->inputs[2];
      if (g_.type(x) != g_.type(op->outputs[0])) return false;
    } else {
      return false;
    }
    user = idx;
  }
}

// K from K^T: `want` is K's shape [B, H, S, D]. Returns the value and the
// perm of a Transpose still to apply (empty: none).
std::optional<std::pair<ValueId, std::vector<int64_t>>> AttentionMatcher::untransposed(ValueId kt, const Shape &want) {
  // No-ops, and reshapes that only regroup the dims before the last two.
  auto batchReshapeInput = [&](ValueId v) -> ValueId {
    const Op *op = def(v);
    if (op && mt_.isNoOp(*op)) return op->inputs[0];
    if (!op || (op->type != "Reshape" && op->type != "Unsqueeze" && op->type != "Squeeze")) return kNoValue;
    const Shape &in = shape(op->inputs[0]), &out = shape(v);
    if (in.size() < 2 || out.size() < 2 || numElements(in) != numElements(out)) return kNoValue;
    if (in[in.size() - 1] != out[out.size() - 1] || in[in.size() - 2] != out[out.size() - 2]) return kNoValue;
    return op->inputs[0];
  };
  ValueId v = kt;
  for (ValueId up = batchReshapeInput(v); up != kNoValue; up = batchReshapeInput(v)) v = up;
  const Op *op = def(v);
  if (op && op->type == "Transpose") {
    ValueId x = op->inputs[0];
    const size_t r = shape(x).size();
    std::vector<int64_t> perm = op->attrs.getInts("perm");
    if (perm.empty()) {
      perm.resize(r);
      for (size_t i = 0; i < r; ++i) perm[i] = int64_t(r - 1 - i);
    }
    std::vector<int64_t> swapLast(r);
    std::iota(swapLast.begin(), swapLast.end(), 0);
    if (r >= 2) std::swap(swapLast[r - 1], swapLast[r - 2]);
    if (r >= 2 && perm == swapLast) {
      // x's matrices are K's; find the view of x with K's shape.
      for (ValueId c = x; c != kNoValue; c = batchReshapeInput(c))
        if (shape(c) == want) return std::make_pair(c, std::vector<int64_t>{});
    } else if (r == 4 && v == kt) {
      std::vector<int64_t> composed{perm[0], perm[1], perm[3], perm[2]};
      if (composed == std::vector<int64_t>{0, 1, 2, 3}) return std::make_pair(x, std::vector<int64_t>{});
      return std::make_pair(x, composed);
    }
  }
  if (shape(kt).size() != 4) return std::nullopt;
  return std::make_pair(kt, std::vector<int64_t>{0, 1, 3, 2});
}

std::optional<AttentionMatch> AttentionMatcher::match(int32_t pv) {
  const Op &prod = g_.ops[size_t(pv)];
  if (prod.type != "MatMul" || prod.inputs.size() != 2 || prod.outputs.size() != 1) return std::nullopt;
  AttentionMatch m;
  m.y = prod.outputs[0];
  const TensorType &yt = g_.type(m.y);
  if (!isFloat32Or64(yt.dtype) || yt.shape.size() != 4) return std::nullopt;

  int32_t softmax = -1, qk = -1;
  bool guarded = false, guardNeeded = false;
  if (!probabilities(prod.inputs[0], pv, softmax, guarded)) return std::nullopt;
  const Op &sm = g_.ops[size_t(softmax)];
  if (!scores(sm.inputs[0], softmax, m, qk, guardNeeded) || (guardNeeded && !guarded)) return std::nullopt;

  const Op &qkOp = g_.ops[size_t(qk)];
  if (qkOp.inputs.size() != 2) return std::nullopt;
  const Shape &scoreShape = shape(qkOp.outputs[0]);
  ValueId kt = qkOp.inputs[1];
  m.q = throughScalars(qkOp.inputs[0], m.scale);
  const Shape &qs = shape(m.q);
  if (qs.size() != 4 || scoreShape.size() != 4) return std::nullopt;
  kt = throughScalars(kt, m.scale);
  const Shape &kts = shape(kt);
  if (kts.size() != 4 || kts[0] != qs[0] || kts[1] != qs[1] || kts[2] != qs[3]) return std::nullopt;
  auto k = untransposed(kt, Shape{kts[0], kts[1], kts[3], kts[2]});
  if (!k) return std::nullopt;
  m.k = k->first;
  m.kPerm = k->second;
  if (m.kPerm.empty()) m.k = throughScalars(m.k, m.scale);

  m.v = prod.inputs[1];
  const Shape &vs = shape(m.v);
  if (vs.size() != 4 || vs[0] != qs[0] || vs[1] != qs[1]) return std::nullopt;
  if (m.kPerm.empty()) {
    ValueId k1 = mt_.unrepeatedKV(m.k), v1 = mt_.unrepeatedKV(m.v);
    if (k1 != m.k && v1 != m.v && shape(k1)[1] == shape(v1)[1]) m.k = k1, m.v = v1;
  }
  if (!(float(m.scale) > 0) || !std::isfinite(float(m.scale))) return std::nullopt;
  for (ValueId x : {m.q, m.k, m.v})
    if (g_.type(x).dtype != yt.dtype) return std::nullopt;

  // Attention's own shape rules must give the product's shape.
  Shape kShape = m.kPerm.empty() ? shape(m.k) : transposed(shape(m.k), m.kPerm);
  Shape maskShape = m.newMask ? m.newMask->shape() : m.mask != kNoValue ? shape(m.mask) : Shape{};
  cpu::AttentionInputShapes in;
  in.q = &qs, in.k = &kShape, in.v = &shape(m.v);
  if (m.mask != kNoValue || m.newMask) in.mask = &maskShape;
  Attrs attrs;
  attrs.set("scale", Attr::ofFloat(float(m.scale)));
  auto d = cpu::attentionDims(attrs, in);
  if (!d) {
    llvm::consumeError(d.takeError());
    return std::nullopt;
  }
  if (d->yShape != yt.shape || (!d->mask4.empty() && d->mask4[3] != d->totalSeq)) return std::nullopt;
  return m;
}

// Replaces the P V MatMul (which produced m.y) by Attention.
void rewrite(Graph &g, const AttentionMatch &m) {
  int32_t at = g.value(m.y).producer;
  const std::string name = g.ops[size_t(at)].name;
  // Ops from textual IR may have no name.
  const std::string base = name.empty() ? g.value(m.y).name : name;
  ValueId k = m.k;
  if (!m.kPerm.empty()) {
    Value kv;
    kv.name = g.value(m.k).name + "_t";
    kv.type = TensorType{g.type(m.k).dtype, transposed(g.type(m.k).shape, m.kPerm), false};
    k = g.addValueUnique(std::move(kv));
    Op t;
    t.type = "Transpose";
    t.name = base + "/k";
    t.inputs = {m.k};
    t.outputs = {k};
    t.attrs.set("perm", Attr::ofInts(m.kPerm));
    g.insertOp(size_t(at), std::move(t));
    ++at;
  }
  Op att;
  att.type = "Attention";
  att.name = name;
  att.inputs = {m.q, k, m.v};
  if (m.newMask)
    att.inputs.push_back(g.addConst(g.value(m.y).name + "_mask", *m.newMask));
  else if (m.mask != kNoValue)
    att.inputs.push_back(m.mask);
  att.outputs = {m.y};
  att.attrs.set("scale", Attr::ofFloat(float(m.scale)));
  if (m.causal) att.attrs.set("is_causal", Attr::ofInt(1));
  g.ops[size_t(at)] = std::move(att);
}

} // namespace

llvm::Error fuseAttention(Graph &g, const PassOptions &opts) {
  std::vector<AttentionMatch> matches;
  {
    AttentionMatcher matcher(g, opts);
    for (size_t i = 0; i < g.ops.size(); ++i)
      if (!g.ops[i].dead && g.ops[i].type == "MatMul")
        if (auto m = matcher.match(int32_t(i))) matches.push_back(std::move(*m));
  }
  if (matches.empty()) return llvm::Error::success();
  for (const AttentionMatch &m : matches) rewrite(g, m);
  markUnusedOpsDead(g, g.outputs);
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
