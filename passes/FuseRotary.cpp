// fuse-rotary: rewrites the rotate-half rotary embedding that Llama-style
// exports write as separate ops,
//     y = q * cos + Concat(Neg(Slice(q, D/2:D)), Slice(q, 0:D/2)) * sin
// (the products and the sum in any operand order) into
// RotaryEmbedding(q, cos_cache, sin_cache) (opset 23, non-interleaved).
// q is 4-D [batch, heads, seq, D]; cos and sin are constants that broadcast
// as [batch or 1, 1, seq or 1, D] (torch's emb = cat(freqs, freqs)). The
// rewrite happens only when every row of both constants has equal halves,
// compared bytewise: RotaryEmbedding then computes exactly the same
// products and sums. The half-width caches [batch or 1, seq or 1, D/2] are
// new constants, shared by every match on the same cos/sin (so the layers
// stay identical for partition-units). The slices, the Neg, the Concat and
// both products must be used by the chain alone; q may have other users.
#include "passes/Match.h"
#include "passes/Pass.h"
#include "runtime/cpu/ShapeSemantics.h"

#include <cstring>
#include <map>

namespace megac::passes {

using namespace ir;

namespace {

struct RotaryMatch {
  ValueId y = kNoValue, q = kNoValue, cos = kNoValue, sin = kNoValue;
};

class RotaryMatcher {
public:
  explicit RotaryMatcher(Graph &g) : m_(g) {}
  std::optional<RotaryMatch> match(const Op &add);

private:
  bool isHalf(ValueId v, const Op *user, ValueId q, bool upper);
  bool rotatedHalf(ValueId v, const Op *user, ValueId q);
  bool isCache(ValueId c, const Shape &q);

  Matcher m_;
};

// v = Slice(q) taking [D/2, D) (upper) or [0, D/2) of the last axis and all
// of the others, with constant starts/ends/axes/steps; used by `user` alone.
bool RotaryMatcher::isHalf(ValueId v, const Op *user, ValueId q, bool upper) {
  const Op *slice = m_.def(v);
  if (!slice || slice->type != "Slice" || slice->outputs.size() != 1 || slice->inputs.size() < 3 ||
      slice->inputs[0] != q || !m_.onlyUsedBy(v, user))
    return false;
  std::vector<int64_t> args[4];
  for (size_t i = 1; i < slice->inputs.size() && i <= 4; ++i) {
    if (slice->inputs[i] == kNoValue) continue;
    const Tensor *t = m_.graph().constValue(slice->inputs[i]);
    if (!t || !isIntegerType(t->dtype())) return false;
    args[i - 1] = t->toInt64Vector();
  }
  const Shape &qs = m_.shape(q);
  auto dims = cpu::resolveSlice(qs, args[0], args[1], args[2], args[3]);
  if (!dims) {
    llvm::consumeError(dims.takeError());
    return false;
  }
  const int64_t d = qs.back(), half = d / 2;
  for (size_t k = 0; k < qs.size(); ++k) {
    const cpu::SliceDim &s = (*dims)[k];
    bool last = k + 1 == qs.size();
    int64_t start = last ? (upper ? half : 0) : 0, count = last ? half : qs[k];
    if (s.step != 1 || s.start != start || s.count != count) return false;
  }
  return true;
}

// v = Concat(Neg(upper half of q), lower half of q) on the last axis, used
// by `user` alone.
bool RotaryMatcher::rotatedHalf(ValueId v, const Op *user, ValueId q) {
  const Op *cat = m_.def(v);
  const int64_t rank = int64_t(m_.shape(q).size());
  if (!cat || cat->type != "Concat" || cat->inputs.size() != 2 || cat->outputs.size() != 1 ||
      !m_.onlyUsedBy(v, user))
    return false;
  int64_t axis = cat->attrs.getInt("axis", 0);
  if (axis != -1 && axis != rank - 1) return false;
  const Op *neg = m_.defOf(cat->inputs[0], "Neg", 1);
  return neg && m_.onlyUsedBy(cat->inputs[0], cat) && isHalf(neg->inputs[0], neg, q, true) &&
         isHalf(cat->inputs[1], cat, q, false);
}

// c is a constant of q's dtype shaped [b, 1, s, D] (leading 1s may be
// missing) with b in {1, batch} and s in {1, seq}, whose rows have equal
// halves byte for byte.
bool RotaryMatcher::isCache(ValueId c, const Shape &q) {
  const Tensor *t = m_.graph().constValue(c);
  if (!t || t->dtype() != m_.type(c).dtype || t->rank() < 1 || t->rank() > 4) return false;
  Shape s4(4 - size_t(t->rank()), 1);
  s4.insert(s4.end(), t->shape().begin(), t->shape().end());
  if ((s4[0] != 1 && s4[0] != q[0]) || s4[1] != 1 || (s4[2] != 1 && s4[2] != q[2]) || s4[3] != q[3]) return false;
  const size_t esize = dtypeSize(t->dtype()), halfBytes = size_t(q[3] / 2) * esize;
  const char *p = static_cast<const char *>(t->raw());
  for (int64_t row = 0; row < s4[0] * s4[2]; ++row) {
    const char *r = p + size_t(row) * 2 * halfBytes;
    if (std::memcmp(r, r + halfBytes, halfBytes) != 0) return false;
  }
  return true;
}

std::optional<RotaryMatch> RotaryMatcher::match(const Op &add) {
  if (add.type != "Add" || add.inputs.size() != 2 || add.outputs.size() != 1) return std::nullopt;
  RotaryMatch r;
  r.y = add.outputs[0];
  const TensorType &yt = m_.type(r.y);
  if (!isFloatType(yt.dtype) || yt.shape.size() != 4 || yt.shape[3] % 2 != 0 || yt.shape[3] == 0)
    return std::nullopt;
  for (int side : {0, 1}) {
    ValueId a = add.inputs[size_t(side)], b = add.inputs[size_t(1 - side)];
    const Op *mulCos = m_.defOf(a, "Mul", 2), *mulSin = m_.defOf(b, "Mul", 2);
    if (!mulCos || !mulSin || a == b || !m_.onlyUsedBy(a, &add) || !m_.onlyUsedBy(b, &add)) continue;
    // q * cos: q has the result's type, cos is the other operand.
    for (int qs : {0, 1}) {
      ValueId q = mulCos->inputs[size_t(qs)], cos = mulCos->inputs[size_t(1 - qs)];
      if (m_.type(q) != yt || m_.type(a) != yt || !isCache(cos, yt.shape)) continue;
      for (int rs : {0, 1}) {
        ValueId rot = mulSin->inputs[size_t(rs)], sin = mulSin->inputs[size_t(1 - rs)];
        if (m_.type(rot) != yt || m_.type(b) != yt || m_.shape(sin) != m_.shape(cos) ||
            m_.type(sin).dtype != yt.dtype || !isCache(sin, yt.shape) || !rotatedHalf(rot, mulSin, q))
          continue;
        r.q = q;
        r.cos = cos;
        r.sin = sin;
        return r;
      }
    }
  }
  return std::nullopt;
}

// The first half of every row of c, as [b, s, D/2].
Tensor halfCache(const Tensor &c, const Shape &q) {
  Shape s4(4 - size_t(c.rank()), 1);
  s4.insert(s4.end(), c.shape().begin(), c.shape().end());
  const int64_t half = q[3] / 2, rows = s4[0] * s4[2];
  Tensor out(c.dtype(), Shape{s4[0], s4[2], half});
  const size_t halfBytes = size_t(half) * dtypeSize(c.dtype());
  const char *src = static_cast<const char *>(c.raw());
  char *dst = static_cast<char *>(out.raw());
  for (int64_t row = 0; row < rows; ++row)
    std::memcpy(dst + size_t(row) * halfBytes, src + size_t(row) * 2 * halfBytes, halfBytes);
  return out;
}

} // namespace

llvm::Error fuseRotary(Graph &g, const PassOptions &) {
  std::vector<RotaryMatch> matches;
  {
    RotaryMatcher matcher(g);
    for (const Op &op : g.ops)
      if (!op.dead && op.type == "Add")
        if (auto r = matcher.match(op)) matches.push_back(*r);
  }
  if (matches.empty()) return llvm::Error::success();
  // One pair of half-width caches per (cos, sin) pair.
  std::map<std::pair<ValueId, ValueId>, std::pair<ValueId, ValueId>> caches;
  for (const RotaryMatch &r : matches) {
    auto key = std::make_pair(r.cos, r.sin);
    auto it = caches.find(key);
    if (it == caches.end()) {
      const Shape q = g.type(r.q).shape;
      Tensor cosHalf = halfCache(*g.constValue(r.cos), q), sinHalf = halfCache(*g.constValue(r.sin), q);
      ValueId c = g.addConst(g.value(r.cos).name + "_cache", std::move(cosHalf));
      ValueId s = g.addConst(g.value(r.sin).name + "_cache", std::move(sinHalf));
      it = caches.emplace(key, std::make_pair(c, s)).first;
    }
    Op rope;
    rope.type = "RotaryEmbedding";
    rope.inputs = {r.q, it->second.first, it->second.second};
    rope.outputs = {r.y};
    replaceProducer(g, r.y, std::move(rope));
  }
  markUnusedOpsDead(g, g.outputs);
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
