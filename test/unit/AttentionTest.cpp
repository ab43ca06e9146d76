// Attention: a hand-computed case, random configurations (3-D/4-D, GQA,
// masks, causal, past cache, nonpad_kv_seqlen, softcap, windows, every
// qk_matmul_output mode) against a naive reference that applies the spec's
// formulas element by element in double, and type inference.
#include "NNOpTestUtil.h"

#include <limits>

using namespace megac;
using namespace megac::nntest;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct AttentionCase {
  Shape q, k, v;                   // all 3-D or all 4-D
  int64_t qHeads = 0, kvHeads = 0; // attributes, for 3-D inputs
  Shape mask;                      // empty: no mask
  DType maskType = DType::F32;
  int64_t pastSeq = -1;        // >= 0: past_key/past_value of this length
  std::vector<int64_t> nonpad; // non-empty: nonpad_kv_seqlen
  bool causal = false;
  float softcap = 0;
  std::optional<float> scale;
  int64_t qkMode = -1; // >= 0: request qk_matmul_output in this mode
  int64_t left = -1, right = -1;
  DType dtype = DType::F32;
};

struct AttentionInputs {
  Tensor q, k, v, mask, pastK, pastV, nonpad;
  std::vector<const Tensor *> list() const {
    std::vector<const Tensor *> r{&q,
                                  &k,
                                  &v,
                                  mask.defined() ? &mask : nullptr,
                                  pastK.defined() ? &pastK : nullptr,
                                  pastV.defined() ? &pastV : nullptr,
                                  nonpad.defined() ? &nonpad : nullptr};
    while (r.back() == nullptr) r.pop_back();
    return r;
  }
};

struct AttentionRef {
  Shape yShape;
  std::vector<double> y, presentK, presentV, qk;
  int64_t B, qH, kvH, Sq, T, D, Dv;
};

Attrs attentionAttrs(const AttentionCase &c) {
  Attrs a;
  if (c.qHeads) a.set("q_num_heads", Attr::ofInt(c.qHeads));
  if (c.kvHeads) a.set("kv_num_heads", Attr::ofInt(c.kvHeads));
  if (c.causal) a.set("is_causal", Attr::ofInt(1));
  if (c.softcap) a.set("softcap", Attr::ofFloat(c.softcap));
  if (c.scale) a.set("scale", Attr::ofFloat(*c.scale));
  if (c.qkMode >= 0) a.set("qk_matmul_output_mode", Attr::ofInt(c.qkMode));
  if (c.left >= 0) a.set("left_window_size", Attr::ofInt(c.left));
  if (c.right >= 0) a.set("right_window_size", Attr::ofInt(c.right));
  return a;
}

AttentionInputs makeInputs(const AttentionCase &c, unsigned seed) {
  AttentionInputs in;
  in.q = randomTensor(c.q, seed, c.dtype);
  in.k = randomTensor(c.k, seed + 1, c.dtype);
  in.v = randomTensor(c.v, seed + 2, c.dtype);
  if (!c.mask.empty()) {
    in.mask = randomTensor(c.mask, seed + 3, c.maskType == DType::Bool ? DType::F32 : c.maskType);
    if (c.maskType == DType::Bool) {
      Tensor b(DType::Bool, c.mask);
      for (int64_t i = 0; i < b.numel(); ++i) b.data<uint8_t>()[i] = in.mask.getAsDouble(i) > -0.5;
      in.mask = b;
    }
  }
  bool is3D = c.q.size() == 3;
  int64_t B = c.q[0], kvH = is3D ? c.kvHeads : c.k[1];
  int64_t D = is3D ? c.k[2] / kvH : c.k[3], Dv = is3D ? c.v[2] / kvH : c.v[3];
  if (c.pastSeq >= 0) {
    in.pastK = randomTensor({B, kvH, c.pastSeq, D}, seed + 4, c.dtype);
    in.pastV = randomTensor({B, kvH, c.pastSeq, Dv}, seed + 5, c.dtype);
  }
  if (!c.nonpad.empty()) in.nonpad = Tensor::fromVector<int64_t>(DType::I64, {B}, c.nonpad);
  return in;
}

// Element (b, h, s, d) of a 4-D [B, H, S, D] or 3-D [B, S, H*D] tensor.
double headAt(const Tensor &t, int64_t H, int64_t D, int64_t b, int64_t h, int64_t s, int64_t d) {
  if (t.rank() == 3) return t.getAsDouble((b * t.dim(1) + s) * H * D + h * D + d);
  return t.getAsDouble(((b * H + h) * t.dim(2) + s) * D + d);
}

double maskBias(const AttentionCase &c, const Tensor &mask, int64_t b, int64_t h, int64_t i, int64_t j) {
  Shape m(4 - c.mask.size(), 1);
  m.insert(m.end(), c.mask.begin(), c.mask.end());
  if (j >= m[3]) return -kInf; // a shorter mask is padded with -inf
  int64_t idx[4] = {m[0] == 1 ? 0 : b, m[1] == 1 ? 0 : h, m[2] == 1 ? 0 : i, j};
  double v = mask.getAsDouble(((idx[0] * m[1] + idx[1]) * m[2] + idx[2]) * m[3] + idx[3]);
  if (c.maskType == DType::Bool) return v != 0 ? 0 : -kInf;
  return v;
}

AttentionRef naiveAttention(const AttentionCase &c, const AttentionInputs &in) {
  AttentionRef r;
  bool is3D = c.q.size() == 3;
  r.B = c.q[0];
  r.qH = is3D ? c.qHeads : c.q[1];
  r.kvH = is3D ? c.kvHeads : c.k[1];
  r.Sq = is3D ? c.q[1] : c.q[2];
  int64_t Skv = is3D ? c.k[1] : c.k[2], P = std::max<int64_t>(c.pastSeq, 0);
  r.T = P + Skv;
  r.D = is3D ? c.q[2] / r.qH : c.q[3];
  r.Dv = is3D ? c.v[2] / r.kvH : c.v[3];
  double scale = c.scale ? double(*c.scale) : 1 / std::sqrt(double(r.D));
  auto keyAt = [&](int64_t b, int64_t h, int64_t j, int64_t d) {
    return j < P ? in.pastK.getAsDouble(((b * r.kvH + h) * P + j) * r.D + d) : headAt(in.k, r.kvH, r.D, b, h, j - P, d);
  };
  auto valueAt = [&](int64_t b, int64_t h, int64_t j, int64_t d) {
    return j < P ? in.pastV.getAsDouble(((b * r.kvH + h) * P + j) * r.Dv + d)
                 : headAt(in.v, r.kvH, r.Dv, b, h, j - P, d);
  };
  r.yShape = is3D ? Shape{r.B, r.Sq, r.qH * r.Dv} : Shape{r.B, r.qH, r.Sq, r.Dv};
  r.y.assign(size_t(r.B * r.qH * r.Sq * r.Dv), 0);
  for (int64_t b = 0; b < r.B; ++b)
    for (int64_t h = 0; h < r.qH; ++h) {
      int64_t kvh = h / (r.qH / r.kvH);
      int64_t offset = c.pastSeq >= 0 ? P : !c.nonpad.empty() ? c.nonpad[size_t(b)] - r.Sq : 0;
      for (int64_t i = 0; i < r.Sq; ++i) {
        std::vector<double> raw(size_t(r.T)), capped(size_t(r.T)), x(size_t(r.T)), p(size_t(r.T), 0);
        bool anyVisible = false;
        for (int64_t j = 0; j < r.T; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < r.D; ++d) dot += headAt(in.q, r.qH, r.D, b, h, i, d) * keyAt(b, kvh, j, d);
          raw[size_t(j)] = dot * scale;
          capped[size_t(j)] = c.softcap > 0 ? c.softcap * std::tanh(raw[size_t(j)] / c.softcap) : raw[size_t(j)];
          double bias = c.mask.empty() ? 0 : maskBias(c, in.mask, b, h, i, j);
          int64_t pos = i + offset;
          bool visible = !(c.causal && j > pos) && !(c.left >= 0 && j < pos - c.left) &&
                         !(c.right >= 0 && j > pos + c.right) && !(!c.nonpad.empty() && j >= c.nonpad[size_t(b)]);
          if (!visible) bias = -kInf;
          anyVisible |= bias != -kInf;
          x[size_t(j)] = capped[size_t(j)] + bias;
        }
        if (anyVisible) {
          double mx = -kInf, sum = 0;
          for (double v : x) mx = std::max(mx, v);
          for (int64_t j = 0; j < r.T; ++j) sum += p[size_t(j)] = std::exp(x[size_t(j)] - mx);
          for (double &v : p) v /= sum;
        }
        for (int64_t d = 0; d < r.Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < r.T; ++j) acc += p[size_t(j)] * valueAt(b, kvh, j, d);
          int64_t at = is3D ? (b * r.Sq + i) * r.qH * r.Dv + h * r.Dv + d : ((b * r.qH + h) * r.Sq + i) * r.Dv + d;
          r.y[size_t(at)] = acc;
        }
        const std::vector<double> *qk = c.qkMode == 0 ? &raw : c.qkMode == 1 ? &capped : c.qkMode == 2 ? &x : &p;
        r.qk.insert(r.qk.end(), qk->begin(), qk->end());
      }
    }
  for (int64_t b = 0; b < r.B; ++b)
    for (int64_t h = 0; h < r.kvH; ++h)
      for (int64_t j = 0; j < r.T; ++j) {
        for (int64_t d = 0; d < r.D; ++d) r.presentK.push_back(keyAt(b, h, j, d));
        for (int64_t d = 0; d < r.Dv; ++d) r.presentV.push_back(valueAt(b, h, j, d));
      }
  return r;
}

// Element-wise comparison where -inf must match exactly.
void expectCloseWithInf(const Tensor &got, const std::vector<double> &want, double tol, const std::string &what) {
  ASSERT_EQ(got.numel(), int64_t(want.size())) << what;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.getAsDouble(i), w = want[size_t(i)];
    if (std::isinf(w))
      EXPECT_EQ(g, w) << what << " element " << i;
    else
      EXPECT_NEAR(g, w, tol * (1 + std::fabs(w))) << what << " element " << i;
  }
}

void checkCase(const AttentionCase &c, unsigned seed, double tol = 2e-5) {
  AttentionInputs in = makeInputs(c, seed);
  AttentionRef want = naiveAttention(c, in);
  std::vector<std::pair<DType, Shape>> outs{{c.dtype, want.yShape},
                                            {c.dtype, {want.B, want.kvH, want.T, want.D}},
                                            {c.dtype, {want.B, want.kvH, want.T, want.Dv}}};
  if (c.qkMode >= 0) outs.push_back({c.dtype, {want.B, want.qH, want.Sq, want.T}});
  auto got = run("Attention", in.list(), outs, attentionAttrs(c));
  expectCloseWithInf(got[0], want.y, tol, "Y");
  expectCloseWithInf(got[1], want.presentK, 0, "present_key");
  expectCloseWithInf(got[2], want.presentV, 0, "present_value");
  if (c.qkMode >= 0) expectCloseWithInf(got[3], want.qk, tol, "qk_matmul_output");
}

TEST(Attention, HandComputed) {
  // One head, scale 1: scores [1, 0] -> p = [e, 1] / (e + 1).
  Tensor q = f32({1, 1, 1, 2}, {1, 0}), k = f32({1, 1, 2, 2}, {1, 0, 0, 1}), v = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  Attrs a;
  a.set("scale", Attr::ofFloat(1.0f));
  auto out = run("Attention", {&q, &k, &v}, {{DType::F32, {1, 1, 1, 2}}}, a);
  const double e = std::exp(1.0), p0 = e / (e + 1), p1 = 1 / (e + 1);
  expectClose(out[0], {p0 * 1 + p1 * 3, p0 * 2 + p1 * 4}, 1e-6);
}

TEST(Attention, FullyMaskedRowIsZero) {
  Tensor q = f32({1, 1, 2, 2}, {1, 0, 0, 1}), k = f32({1, 1, 2, 2}, {1, 0, 0, 1}), v = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor mask(DType::Bool, {2, 2});
  mask.data<uint8_t>()[0] = 1; // row 0 sees key 0 only; row 1 sees nothing
  Attrs a;
  a.set("qk_matmul_output_mode", Attr::ofInt(3));
  auto out = run("Attention", {&q, &k, &v, &mask}, {{DType::F32, {1, 1, 2, 2}}, {}, {}, {DType::F32, {1, 1, 2, 2}}}, a);
  expectClose(out[0], {1, 2, 0, 0}, 1e-7);
  expectClose(out[3], {1, 0, 0, 0}, 1e-7);
}

TEST(Attention, RandomAgainstNaive) {
  std::vector<AttentionCase> cases;
  AttentionCase c;
  c.q = {2, 4, 3, 8}, c.k = {2, 4, 5, 8}, c.v = {2, 4, 5, 6};
  cases.push_back(c); // plain MHA, cross lengths
  c.causal = true, c.qkMode = 0;
  cases.push_back(c); // causal, top-left (no cache)
  c.k = {2, 2, 5, 8}, c.v = {2, 2, 5, 6}, c.qkMode = 1, c.softcap = 1.5f;
  cases.push_back(c); // GQA + softcap
  c.mask = {2, 1, 3, 5}, c.maskType = DType::Bool, c.qkMode = 2, c.softcap = 0;
  cases.push_back(c); // bool mask + causal
  c.pastSeq = 4, c.k = {2, 2, 3, 8}, c.v = {2, 2, 3, 6}, c.mask = {3, 7}, c.maskType = DType::F32, c.qkMode = 3;
  cases.push_back(c); // past cache: causal offset 4, float mask
  c.mask = {4, 3, 5}, c.scale = 0.7f;
  cases.push_back(c); // rank-3 mask is [heads, q, kv]; mask shorter than 7
  AttentionCase d;
  d.q = {2, 3, 16}, d.k = {2, 5, 8}, d.v = {2, 5, 12}, d.qHeads = 4, d.kvHeads = 2;
  cases.push_back(d); // 3-D GQA
  d.pastSeq = 2, d.causal = true, d.mask = {3, 7}, d.qkMode = 2;
  cases.push_back(d); // 3-D with past
  AttentionCase n;
  n.q = {2, 2, 3, 4}, n.k = {2, 2, 6, 4}, n.v = {2, 2, 6, 4}, n.nonpad = {5, 2}, n.causal = true, n.qkMode = 3;
  cases.push_back(n); // external cache: offsets 2 and -1 (row 0 fully masked)
  n.causal = false, n.left = 1, n.right = 0;
  cases.push_back(n); // sliding window
  n.nonpad.clear(), n.left = 2, n.right = 1, n.mask = {1, 6}, n.maskType = DType::I64;
  cases.push_back(n); // integer mask added as numbers
  unsigned seed = 100;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    checkCase(cases[i], seed += 10);
  }
}

TEST(Attention, DoubleAndHalf) {
  AttentionCase c;
  c.q = {1, 2, 4, 8}, c.k = {1, 1, 4, 8}, c.v = {1, 1, 4, 8}, c.causal = true, c.dtype = DType::F64;
  checkCase(c, 7, 1e-12);
  c.dtype = DType::F16;
  checkCase(c, 8, 5e-3);
}

TEST(Attention, LargeEnoughToRunThreads) {
  AttentionCase c;
  c.q = {2, 8, 64, 32}, c.k = {2, 2, 64, 32}, c.v = {2, 2, 64, 32}, c.causal = true;
  checkCase(c, 9);
}

TEST(AttentionInference, Shapes) {
  Attrs a;
  a.set("q_num_heads", Attr::ofInt(4));
  a.set("kv_num_heads", Attr::ofInt(2));
  auto g = oneOp("Attention",
                 {tt(DType::F32, {2, 3, 16}), tt(DType::F32, {2, 5, 8}), tt(DType::F32, {2, 5, 12}),
                  tt(DType::Bool, {3, 7}), tt(DType::F32, {2, 2, 2, 4}), tt(DType::F32, {2, 2, 2, 6})},
                 4, a);
  ASSERT_EQ(errorText(passes::specialize(g->g, {})), "");
  EXPECT_EQ(outputType(*g, 0), "f32[2,3,24]");
  EXPECT_EQ(outputType(*g, 1), "f32[2,2,7,4]");
  EXPECT_EQ(outputType(*g, 2), "f32[2,2,7,6]");
  EXPECT_EQ(outputType(*g, 3), "f32[2,4,3,7]");
}

TEST(AttentionInference, Errors) {
  auto check = [](std::vector<std::optional<ir::TensorType>> ins, Attrs a, const std::string &want) {
    auto g = oneOp("Attention", std::move(ins), 1, std::move(a));
    std::string err = errorText(passes::specialize(g->g, {}));
    EXPECT_NE(err.find(want), std::string::npos) << err;
  };
  Attrs none;
  check({tt(DType::F32, {2, 3, 16}), tt(DType::F32, {2, 5, 8}), tt(DType::F32, {2, 5, 8})}, none,
        "q_num_heads is required");
  check({tt(DType::F32, {2, 3, 3, 4}), tt(DType::F32, {2, 2, 5, 4}), tt(DType::F32, {2, 2, 5, 4})}, none,
        "must be a multiple of kv heads");
  check({tt(DType::F32, {2, 2, 3, 4}), tt(DType::F32, {2, 2, 5, 4}), tt(DType::F32, {2, 2, 5, 4}), std::nullopt,
         tt(DType::F32, {2, 2, 1, 4})},
        none, "past_key and past_value must be given together");
  check({tt(DType::F32, {2, 2, 3, 4}), tt(DType::F32, {2, 2, 5, 4}), tt(DType::F32, {2, 2, 5, 4}),
         tt(DType::F32, {2, 3, 3, 5})},
        none, "does not broadcast");
  check({tt(DType::F32, {2, 2, 3, 4}), tt(DType::F32, {2, 2, 5, 4}), tt(DType::F32, {2, 2, 5, 4}),
         tt(DType::F32, {3, 6})},
        none, "exceeds the total sequence length");
}

} // namespace
