#include "runtime/cpu/NormAttentionShapes.h"

#include "llvm/ADT/Twine.h"

#include <cmath>

namespace megac::cpu {

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

// --- norms ---

llvm::Expected<NormDims> normDims(const Shape &x, int64_t axis) {
  int64_t rank = int64_t(x.size());
  if (axis < -rank || axis >= rank)
    return fail("axis " + llvm::Twine(axis) + " is out of range for X of rank " + llvm::Twine(rank));
  NormDims d;
  d.axis = axis < 0 ? axis + rank : axis;
  d.statShape = x;
  for (int64_t i = 0; i < rank; ++i) {
    if (i < d.axis) {
      d.rows *= x[size_t(i)];
    } else {
      d.cols *= x[size_t(i)];
      d.statShape[size_t(i)] = 1;
    }
  }
  return d;
}

llvm::Error checkNormParam(const Shape &param, const Shape &x, llvm::StringRef what) {
  bool ok = param.size() <= x.size();
  for (size_t i = 0; ok && i < param.size(); ++i) {
    int64_t p = param[param.size() - 1 - i], t = x[x.size() - 1 - i];
    ok = p == t || p == 1;
  }
  if (ok) return llvm::Error::success();
  return fail(what + " of shape " + shapeToString(param) + " does not broadcast to X of shape " + shapeToString(x));
}

llvm::Expected<DType> stashDType(int64_t stashType) {
  DType d = DType(int32_t(stashType));
  if (d == DType::F32 || d == DType::F64 || d == DType::F16 || d == DType::BF16) return d;
  return fail("stash_type " + llvm::Twine(stashType) + " is not a floating-point type");
}

// --- Attention ---

static llvm::Expected<int64_t> headsAttr(const Attrs &a, const char *name) {
  const Attr *at = a.get(name);
  if (!at) return fail(llvm::Twine(name) + " is required for 3-D Q, K and V");
  if (at->i <= 0) return fail(llvm::Twine(name) + " must be positive, got " + llvm::Twine(at->i));
  return at->i;
}

static llvm::Error checkHeadsMatch(const Attrs &a, const char *name, int64_t fromShape) {
  if (const Attr *at = a.get(name))
    if (at->i != fromShape)
      return fail(llvm::Twine(name) + " is " + llvm::Twine(at->i) + " but the 4-D inputs have " +
                  llvm::Twine(fromShape) + " heads");
  return llvm::Error::success();
}

static llvm::Error readAttentionHeads(const Attrs &a, const AttentionInputShapes &in, AttentionDims &d) {
  const Shape &q = *in.q, &k = *in.k, &v = *in.v;
  if (q.size() != k.size() || q.size() != v.size() || (q.size() != 3 && q.size() != 4))
    return fail("Q, K and V must all be 3-D or all 4-D, got " + shapeToString(q) + ", " + shapeToString(k) + " and " +
                shapeToString(v));
  d.is3D = q.size() == 3;
  d.batch = q[0];
  if (k[0] != d.batch || v[0] != d.batch)
    return fail("Q, K and V have different batch sizes: " + shapeToString(q) + ", " + shapeToString(k) + ", " +
                shapeToString(v));
  if (d.is3D) {
    auto qh = headsAttr(a, "q_num_heads");
    if (!qh) return qh.takeError();
    auto kvh = headsAttr(a, "kv_num_heads");
    if (!kvh) return kvh.takeError();
    d.qHeads = *qh;
    d.kvHeads = *kvh;
    d.qSeq = q[1];
    d.kvSeq = k[1];
    if (q[2] % d.qHeads || k[2] % d.kvHeads || v[2] % d.kvHeads)
      return fail("hidden sizes of Q " + shapeToString(q) + ", K " + shapeToString(k) + ", V " + shapeToString(v) +
                  " are not divisible by q_num_heads " + llvm::Twine(d.qHeads) + " / kv_num_heads " +
                  llvm::Twine(d.kvHeads));
    d.headSize = q[2] / d.qHeads;
    if (k[2] / d.kvHeads != d.headSize)
      return fail("K's head size " + llvm::Twine(k[2] / d.kvHeads) + " differs from Q's " + llvm::Twine(d.headSize));
    d.vHeadSize = v[2] / d.kvHeads;
    if (v[1] != d.kvSeq) return fail("K and V have different sequence lengths");
  } else {
    d.qHeads = q[1];
    d.kvHeads = k[1];
    d.qSeq = q[2];
    d.kvSeq = k[2];
    d.headSize = q[3];
    d.vHeadSize = v[3];
    if (v[1] != d.kvHeads || v[2] != d.kvSeq)
      return fail("K " + shapeToString(k) + " and V " + shapeToString(v) + " disagree on heads or sequence length");
    if (k[3] != d.headSize)
      return fail("K's head size " + llvm::Twine(k[3]) + " differs from Q's " + llvm::Twine(d.headSize));
    // Opset 23/24 allow the attributes with 4-D inputs; they must agree.
    if (auto e = checkHeadsMatch(a, "q_num_heads", d.qHeads)) return e;
    if (auto e = checkHeadsMatch(a, "kv_num_heads", d.kvHeads)) return e;
  }
  if (d.kvHeads <= 0 || d.qHeads % d.kvHeads)
    return fail("q heads (" + llvm::Twine(d.qHeads) + ") must be a multiple of kv heads (" + llvm::Twine(d.kvHeads) +
                ")");
  return llvm::Error::success();
}

static llvm::Error readAttentionCache(const AttentionInputShapes &in, AttentionDims &d) {
  if ((in.pastKey == nullptr) != (in.pastValue == nullptr))
    return fail("past_key and past_value must be given together");
  if (in.pastKey) {
    const Shape &pk = *in.pastKey, &pv = *in.pastValue;
    Shape wantK{d.batch, d.kvHeads, pk.size() == 4 ? pk[2] : 0, d.headSize};
    if (pk.size() != 4 || pk != wantK)
      return fail("past_key " + shapeToString(pk) +
                  " must be [batch, kv_heads, past_seq, head_size] = " + shapeToString(wantK));
    d.pastSeq = pk[2];
    Shape wantV{d.batch, d.kvHeads, d.pastSeq, d.vHeadSize};
    if (pv != wantV) return fail("past_value " + shapeToString(pv) + " must be " + shapeToString(wantV));
  }
  if (in.nonpadKvSeqlen) {
    if (in.pastKey) return fail("nonpad_kv_seqlen cannot be combined with past_key/past_value");
    if (*in.nonpadKvSeqlen != Shape{d.batch})
      return fail("nonpad_kv_seqlen " + shapeToString(*in.nonpadKvSeqlen) + " must be [batch] = [" +
                  llvm::Twine(d.batch) + "]");
  }
  d.totalSeq = d.pastSeq + d.kvSeq;
  return llvm::Error::success();
}

static llvm::Error readAttentionMask(const AttentionInputShapes &in, AttentionDims &d) {
  if (!in.mask) return llvm::Error::success();
  const Shape &m = *in.mask;
  if (m.empty() || m.size() > 4) return fail("attn_mask must have rank 1 to 4, got " + shapeToString(m));
  d.mask4 = Shape(4 - m.size(), 1);
  d.mask4.insert(d.mask4.end(), m.begin(), m.end());
  const int64_t want[3] = {d.batch, d.qHeads, d.qSeq};
  for (int i = 0; i < 3; ++i)
    if (d.mask4[size_t(i)] != 1 && d.mask4[size_t(i)] != want[i])
      return fail("attn_mask " + shapeToString(m) + " does not broadcast to [" + llvm::Twine(d.batch) + "," +
                  llvm::Twine(d.qHeads) + "," + llvm::Twine(d.qSeq) + "," + llvm::Twine(d.totalSeq) + "]");
  // A shorter last dim is padded with -inf (opset 24).
  if (d.mask4[3] > d.totalSeq)
    return fail("attn_mask's last dim " + llvm::Twine(d.mask4[3]) + " exceeds the total sequence length " +
                llvm::Twine(d.totalSeq));
  return llvm::Error::success();
}

static llvm::Error readAttentionAttrs(const Attrs &a, AttentionDims &d) {
  if (const Attr *s = a.get("scale")) {
    d.scale = s->f;
  } else {
    if (d.headSize <= 0) return fail("head size is 0; give a scale");
    d.scale = 1.0 / std::sqrt(double(d.headSize));
  }
  d.softcap = a.getFloat("softcap", 0.0f);
  d.qkMode = a.getInt("qk_matmul_output_mode", 0);
  if (d.qkMode < 0 || d.qkMode > 3) return fail("qk_matmul_output_mode must be 0..3, got " + llvm::Twine(d.qkMode));
  d.causal = a.getInt("is_causal", 0) != 0;
  d.leftWindow = a.getInt("left_window_size", -1);
  d.rightWindow = a.getInt("right_window_size", -1);
  if (d.leftWindow < -1 || d.rightWindow < -1) return fail("window sizes must be -1 or nonnegative");
  if (const Attr *p = a.get("softmax_precision"))
    if (p->i != 1 && p->i != 10 && p->i != 11 && p->i != 16)
      return fail("softmax_precision " + llvm::Twine(p->i) + " is not a floating-point type");
  return llvm::Error::success();
}

llvm::Expected<AttentionDims> attentionDims(const Attrs &attrs, const AttentionInputShapes &in) {
  AttentionDims d;
  if (!in.q || !in.k || !in.v) return fail("Q, K and V are required");
  if (auto e = readAttentionHeads(attrs, in, d)) return e;
  if (auto e = readAttentionCache(in, d)) return e;
  if (auto e = readAttentionMask(in, d)) return e;
  if (auto e = readAttentionAttrs(attrs, d)) return e;
  d.yShape = d.is3D ? Shape{d.batch, d.qSeq, d.qHeads * d.vHeadSize} : Shape{d.batch, d.qHeads, d.qSeq, d.vHeadSize};
  d.presentKeyShape = {d.batch, d.kvHeads, d.totalSeq, d.headSize};
  d.presentValueShape = {d.batch, d.kvHeads, d.totalSeq, d.vHeadSize};
  d.qkShape = {d.batch, d.qHeads, d.qSeq, d.totalSeq};
  return d;
}

// --- RotaryEmbedding ---

static bool oneOr(int64_t dim, int64_t full) { return dim == 1 || dim == full; }

llvm::Expected<RotaryDims> rotaryDims(const Attrs &attrs, const Shape &x, const Shape &cos, const Shape &sin,
                                      const Shape *positionIds) {
  RotaryDims d;
  if (x.size() == 4) {
    d.batch = x[0];
    d.heads = x[1];
    d.seq = x[2];
    d.headSize = x[3];
  } else if (x.size() == 3) {
    d.is3D = true;
    d.batch = x[0];
    d.seq = x[1];
    d.heads = attrs.getInt("num_heads", 0);
    if (d.heads <= 0) return fail("num_heads is required (and positive) for a 3-D input");
    if (x[2] % d.heads)
      return fail("hidden size " + llvm::Twine(x[2]) + " is not divisible by num_heads " + llvm::Twine(d.heads));
    d.headSize = x[2] / d.heads;
  } else {
    return fail("input must be 3-D or 4-D, got " + shapeToString(x));
  }
  d.interleaved = attrs.getInt("interleaved", 0) != 0;
  d.rotaryDim = attrs.getInt("rotary_embedding_dim", 0);
  if (d.rotaryDim == 0) d.rotaryDim = d.headSize;
  if (d.rotaryDim < 0 || d.rotaryDim > d.headSize || d.rotaryDim % 2)
    return fail("rotary_embedding_dim " + llvm::Twine(d.rotaryDim) + " must be even and at most the head size " +
                llvm::Twine(d.headSize));
  if (cos != sin) return fail("cos_cache " + shapeToString(cos) + " and sin_cache " + shapeToString(sin) + " differ");
  const int64_t half = d.rotaryDim / 2;
  if (cos.empty() || cos.back() != half)
    return fail("the caches' last dim must be rotary_embedding_dim/2 = " + llvm::Twine(half) + ", got " +
                shapeToString(cos));
  if (positionIds) {
    d.hasPositionIds = true;
    if (cos.size() != 2) return fail("with position_ids the caches must be 2-D, got " + shapeToString(cos));
    d.maxPositions = cos[0];
    if (positionIds->size() != 2)
      return fail("position_ids must be 2-D [batch, seq], got " + shapeToString(*positionIds));
    d.tableBatch = (*positionIds)[0];
    d.tableSeq = (*positionIds)[1];
  } else {
    if (cos.size() != 3)
      return fail("without position_ids the caches must be 3-D [batch, seq, dim/2], got " + shapeToString(cos));
    d.tableBatch = cos[0];
    d.tableSeq = cos[1];
  }
  // Batch 1 broadcasts over the batch (the torch exporter hands such caches).
  if (!oneOr(d.tableBatch, d.batch) || !oneOr(d.tableSeq, d.seq))
    return fail(
        llvm::Twine(positionIds ? "position_ids " + shapeToString(*positionIds) : "caches " + shapeToString(cos)) +
        " do not match batch " + llvm::Twine(d.batch) + " and sequence length " + llvm::Twine(d.seq));
  return d;
}

std::vector<int64_t> offsetsOver(const Shape &x, const std::vector<int64_t> &strides, size_t begin, size_t end) {
  std::vector<int64_t> offs{0};
  for (size_t d = begin; d < end; ++d) {
    std::vector<int64_t> next;
    next.reserve(offs.size() * size_t(x[d]));
    for (int64_t o : offs)
      for (int64_t i = 0; i < x[d]; ++i) next.push_back(o + i * strides[d]);
    offs.swap(next);
  }
  return offs;
}

} // namespace megac::cpu
