// LayerNormalization, RMSNormalization and RotaryEmbedding: hand-computed
// cases, random inputs against naive references written from the spec's
// formulas (in double), type inference and error cases.
#include "NNOpTestUtil.h"

using namespace megac;
using namespace megac::nntest;

namespace {

Attrs normAttrs(int64_t axis, float eps) {
  Attrs a;
  a.set("axis", Attr::ofInt(axis));
  a.set("epsilon", Attr::ofFloat(eps));
  return a;
}

// Value of `p` broadcast (right-aligned) to `shape` at flat index i of shape.
double broadcastAt(const Tensor &p, const Shape &shape, int64_t i) {
  std::vector<int64_t> st = rowMajorStrides(shape), pst = rowMajorStrides(p.shape());
  int64_t lead = int64_t(shape.size()) - p.rank(), off = 0;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    int64_t idx = (i / st[size_t(d)]) % shape[size_t(d)];
    if (d >= lead && p.shape()[size_t(d - lead)] != 1) off += idx * pst[size_t(d - lead)];
  }
  return p.getAsDouble(off);
}

struct NormRef {
  std::vector<double> y, mean, invStd;
};

NormRef naiveNorm(const Tensor &x, const Tensor &scale, const Tensor *bias, int64_t axis, double eps, bool rms) {
  if (axis < 0) axis += x.rank();
  int64_t cols = 1;
  for (int64_t d = axis; d < x.rank(); ++d) cols *= x.dim(d);
  int64_t rows = x.numel() / cols;
  NormRef r;
  for (int64_t row = 0; row < rows; ++row) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += x.getAsDouble(row * cols + c) / double(cols);
    if (rms) mean = 0;
    for (int64_t c = 0; c < cols; ++c) var += std::pow(x.getAsDouble(row * cols + c) - mean, 2) / double(cols);
    double inv = 1 / std::sqrt(var + eps);
    for (int64_t c = 0; c < cols; ++c) {
      int64_t i = row * cols + c;
      double v = (x.getAsDouble(i) - mean) * inv * broadcastAt(scale, x.shape(), i);
      if (bias) v += broadcastAt(*bias, x.shape(), i);
      r.y.push_back(v);
    }
    r.mean.push_back(mean);
    r.invStd.push_back(inv);
  }
  return r;
}

Shape statShape(Shape s, int64_t axis) {
  if (axis < 0) axis += int64_t(s.size());
  for (size_t d = size_t(axis); d < s.size(); ++d) s[d] = 1;
  return s;
}

TEST(LayerNormalization, HandComputed) {
  // Row [1,2,3,4]: mean 2.5, variance 1.25. Row [2,2,6,6]: mean 4, variance 4.
  Tensor x = f32({2, 4}, {1, 2, 3, 4, 2, 2, 6, 6});
  Tensor scale = f32({4}, {1, 1, 2, 2}), bias = f32({4}, {0, 1, 0, 1});
  auto outs = run("LayerNormalization", {&x, &scale, &bias},
                  {{DType::F32, {2, 4}}, {DType::F32, {2, 1}}, {DType::F32, {2, 1}}}, normAttrs(-1, 0.0f));
  const double s = 1 / std::sqrt(1.25);
  expectClose(outs[0], {-1.5 * s, -0.5 * s + 1, 2 * 0.5 * s, 2 * 1.5 * s + 1, -1, 0, 2, 3}, 1e-6);
  expectClose(outs[1], {2.5, 4}, 1e-7);
  expectClose(outs[2], {s, 0.5}, 1e-6);
  // With epsilon 0 a constant row divides 0 by 0.
  Tensor flat = f32({1, 2}, {3, 3}), one = f32({2}, {1, 1});
  auto nan = run("LayerNormalization", {&flat, &one}, {{DType::F32, {1, 2}}}, normAttrs(-1, 0.0f));
  EXPECT_TRUE(std::isnan(nan[0].getAsDouble(0)));
}

TEST(LayerNormalization, RandomAxesAgainstNaive) {
  Tensor x = randomTensor({3, 4, 5}, 1);
  for (int64_t axis : {0, 1, 2, -1, -2}) {
    Shape norm(x.shape().begin() + (axis < 0 ? axis + 3 : axis), x.shape().end());
    Tensor scale = randomTensor(norm, 2), bias = randomTensor(norm, 3);
    Shape st = statShape(x.shape(), axis);
    auto outs = run("LayerNormalization", {&x, &scale, &bias},
                    {{DType::F32, x.shape()}, {DType::F32, st}, {DType::F32, st}}, normAttrs(axis, 1e-5f));
    NormRef want = naiveNorm(x, scale, &bias, axis, 1e-5, false);
    expectClose(outs[0], want.y, 1e-5);
    expectClose(outs[1], want.mean, 1e-5);
    expectClose(outs[2], want.invStd, 1e-5);
  }
}

TEST(LayerNormalization, ParamsBroadcastOverLeadingDimsAndNoBias) {
  // Axis 2 normalizes the last dim, but Scale [4,1] varies along dim 1 (before
  // the axis): each row has its own scale. B is omitted.
  Tensor x = randomTensor({2, 4, 3}, 4), scale = randomTensor({4, 1}, 5);
  auto outs = run("LayerNormalization", {&x, &scale, nullptr}, {{DType::F32, x.shape()}}, normAttrs(2, 1e-5f));
  expectClose(outs[0], naiveNorm(x, scale, nullptr, 2, 1e-5, false).y, 1e-5);
}

TEST(LayerNormalization, Float16AndDoubleStash) {
  Tensor x = randomTensor({3, 8}, 6, DType::F16), scale = randomTensor({8}, 7, DType::F16);
  Attrs a = normAttrs(-1, 1e-5f);
  a.set("stash_type", Attr::ofInt(11));
  auto outs = run("LayerNormalization", {&x, &scale}, {{DType::F16, {3, 8}}, {DType::F64, {3, 1}}}, a);
  NormRef want = naiveNorm(x, scale, nullptr, -1, 1e-5, false);
  expectClose(outs[0], want.y, 2e-3);
  expectClose(outs[1], want.mean, 1e-12);
}

TEST(LayerNormalization, BadScaleIsAnError) {
  Tensor x = randomTensor({2, 4}, 8), scale = randomTensor({3}, 9);
  EXPECT_NE(kernelErrorText("LayerNormalization", {&x, &scale}, DType::F32, {2, 4}, normAttrs(-1, 1e-5f))
                .find("does not broadcast"),
            std::string::npos);
}

TEST(RMSNormalization, HandComputed) {
  // Row [3,4]: mean square 12.5.
  Tensor x = f32({1, 2}, {3, 4}), scale = f32({2}, {2, 0.5f});
  auto outs = run("RMSNormalization", {&x, &scale}, {{DType::F32, {1, 2}}}, normAttrs(-1, 0.0f));
  const double r = std::sqrt(12.5);
  expectClose(outs[0], {2 * 3 / r, 0.5 * 4 / r}, 1e-6);
}

TEST(RMSNormalization, RandomAxesAgainstNaive) {
  Tensor x = randomTensor({2, 3, 6}, 10);
  for (int64_t axis : {0, 1, -1}) {
    Shape norm(x.shape().begin() + (axis < 0 ? axis + 3 : axis), x.shape().end());
    Tensor scale = randomTensor(norm, 11);
    auto outs = run("RMSNormalization", {&x, &scale}, {{DType::F32, x.shape()}}, normAttrs(axis, 1e-6f));
    expectClose(outs[0], naiveNorm(x, scale, nullptr, axis, 1e-6, true).y, 1e-5);
  }
}

// --- type inference, through the specialize pass ---

TEST(NormInference, LayerNormalizationStatsUseStashType) {
  Attrs a = normAttrs(1, 1e-5f);
  a.set("stash_type", Attr::ofInt(11));
  auto g = oneOp("LayerNormalization", {tt(DType::F16, {2, 3, 4}), tt(DType::F16, {3, 4})}, 3, a);
  ASSERT_EQ(errorText(passes::specialize(g->g, {})), "");
  EXPECT_EQ(outputType(*g, 0), "f16[2,3,4]");
  EXPECT_EQ(outputType(*g, 1), "f64[2,1,1]");
  EXPECT_EQ(outputType(*g, 2), "f64[2,1,1]");
}

TEST(NormInference, Errors) {
  auto badAxis = oneOp("RMSNormalization", {tt(DType::F32, {2, 3}), tt(DType::F32, {3})}, 1, normAttrs(2, 1e-5f));
  EXPECT_NE(errorText(passes::specialize(badAxis->g, {})).find("axis 2 is out of range"), std::string::npos);
  auto badScale = oneOp("LayerNormalization", {tt(DType::F32, {2, 3}), tt(DType::F32, {2})}, 1, normAttrs(-1, 1e-5f));
  EXPECT_NE(errorText(passes::specialize(badScale->g, {})).find("does not broadcast"), std::string::npos);
  auto intX = oneOp("LayerNormalization", {tt(DType::I64, {2, 3}), tt(DType::I64, {3})}, 1, normAttrs(-1, 1e-5f));
  EXPECT_NE(errorText(passes::specialize(intX->g, {})).find("must be a float tensor"), std::string::npos);
}

// --- RotaryEmbedding ---

struct RotaryCase {
  Shape x;              // 3-D or 4-D
  int64_t numHeads = 0; // for 3-D
  int64_t rotaryDim = 0;
  bool interleaved = false;
  Shape cache;                      // cos/sin shape
  std::vector<int64_t> positionIds; // [batch, seq] when non-empty
  Shape positionShape;
};

Attrs rotaryAttrs(const RotaryCase &c) {
  Attrs a;
  if (c.numHeads) a.set("num_heads", Attr::ofInt(c.numHeads));
  if (c.rotaryDim) a.set("rotary_embedding_dim", Attr::ofInt(c.rotaryDim));
  a.set("interleaved", Attr::ofInt(c.interleaved));
  return a;
}

// The spec's formula, element by element, in double.
std::vector<double> naiveRotary(const RotaryCase &c, const Tensor &x, const Tensor &cos, const Tensor &sin) {
  bool is3D = c.x.size() == 3;
  int64_t B = c.x[0], H = is3D ? c.numHeads : c.x[1], S = is3D ? c.x[1] : c.x[2];
  int64_t D = is3D ? c.x[2] / H : c.x[3];
  int64_t rd = c.rotaryDim ? c.rotaryDim : D, half = rd / 2;
  std::vector<double> y(size_t(x.numel()));
  auto at = [&](int64_t b, int64_t h, int64_t s, int64_t d) {
    return is3D ? ((b * S + s) * H + h) * D + d : ((b * H + h) * S + s) * D + d;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s) {
        int64_t row;
        if (!c.positionIds.empty()) {
          int64_t pb = c.positionShape[0] == 1 ? 0 : b;
          row = c.positionIds[size_t(pb * S + s)];
        } else {
          row = (c.cache[0] == 1 ? 0 : b) * c.cache[1] + (c.cache[1] == 1 ? 0 : s);
        }
        for (int64_t d = 0; d < D; ++d) y[size_t(at(b, h, s, d))] = x.getAsDouble(at(b, h, s, d));
        for (int64_t k = 0; k < half; ++k) {
          double co = cos.getAsDouble(row * half + k), si = sin.getAsDouble(row * half + k);
          int64_t i1 = c.interleaved ? 2 * k : k, i2 = c.interleaved ? 2 * k + 1 : k + half;
          double x1 = x.getAsDouble(at(b, h, s, i1)), x2 = x.getAsDouble(at(b, h, s, i2));
          y[size_t(at(b, h, s, i1))] = co * x1 - si * x2;
          y[size_t(at(b, h, s, i2))] = si * x1 + co * x2;
        }
      }
  return y;
}

TEST(RotaryEmbedding, HandComputed) {
  // One head of 4; angle 90 degrees for the first pair, 0 for the second.
  Tensor x = f32({1, 1, 1, 4}, {1, 2, 3, 4});
  Tensor cos = f32({1, 1, 2}, {0, 1}), sin = f32({1, 1, 2}, {1, 0});
  RotaryCase c;
  auto halves = run("RotaryEmbedding", {&x, &cos, &sin}, {{DType::F32, {1, 1, 1, 4}}}, rotaryAttrs(c));
  expectClose(halves[0], {-3, 2, 1, 4}, 1e-7);
  c.interleaved = true;
  auto pairs = run("RotaryEmbedding", {&x, &cos, &sin}, {{DType::F32, {1, 1, 1, 4}}}, rotaryAttrs(c));
  expectClose(pairs[0], {-2, 1, 3, 4}, 1e-7);
}

TEST(RotaryEmbedding, RandomAgainstNaive) {
  std::vector<RotaryCase> cases;
  cases.push_back({{2, 3, 5, 8}, 0, 0, false, {2, 5, 4}, {}, {}});           // 4-D, per-token caches
  cases.push_back({{2, 3, 5, 8}, 0, 0, true, {1, 5, 4}, {}, {}});            // batch-1 caches broadcast
  cases.push_back({{2, 5, 12}, 3, 2, false, {2, 5, 1}, {}, {}});             // 3-D, partial rotation
  cases.push_back({{2, 4, 2, 6}, 0, 4, true, {7, 2}, {0, 6, 3, 1}, {2, 2}}); // position ids (4-D)
  cases.push_back({{2, 3, 8}, 2, 0, false, {5, 2}, {4, 0, 2}, {1, 3}});      // ids of batch 1 broadcast
  unsigned seed = 20;
  for (const RotaryCase &c : cases) {
    Tensor x = randomTensor(c.x, seed++), cos = randomTensor(c.cache, seed++), sin = randomTensor(c.cache, seed++);
    Tensor ids =
        c.positionIds.empty() ? Tensor() : Tensor::fromVector<int64_t>(DType::I64, c.positionShape, c.positionIds);
    std::vector<const Tensor *> ins{&x, &cos, &sin};
    if (!c.positionIds.empty()) ins.push_back(&ids);
    auto outs = run("RotaryEmbedding", ins, {{DType::F32, c.x}}, rotaryAttrs(c));
    expectClose(outs[0], naiveRotary(c, x, cos, sin), 1e-5);
  }
}

TEST(RotaryEmbedding, Errors) {
  Tensor x = randomTensor({1, 2, 2, 4}, 1), cos = randomTensor({3, 2}, 2), sin = randomTensor({3, 2}, 3);
  Tensor ids = Tensor::fromVector<int64_t>(DType::I64, {1, 2}, {0, 3});
  EXPECT_NE(kernelErrorText("RotaryEmbedding", {&x, &cos, &sin, &ids}, DType::F32, {1, 2, 2, 4}, Attrs())
                .find("position id 3 is out of range"),
            std::string::npos);
  Tensor x3 = randomTensor({1, 2, 8}, 4), c3 = randomTensor({1, 2, 2}, 5);
  EXPECT_NE(
      kernelErrorText("RotaryEmbedding", {&x3, &c3, &c3}, DType::F32, {1, 2, 8}, Attrs()).find("num_heads is required"),
      std::string::npos);
  Tensor badCache = randomTensor({3, 2, 2}, 6); // batch 3 vs 1
  EXPECT_NE(kernelErrorText("RotaryEmbedding", {&x, &badCache, &badCache}, DType::F32, {1, 2, 2, 4}, Attrs())
                .find("do not match batch 1"),
            std::string::npos);
}

TEST(RotaryInference, ShapesAndErrors) {
  Attrs a;
  a.set("num_heads", Attr::ofInt(2));
  auto ok =
      oneOp("RotaryEmbedding", {tt(DType::F32, {2, 3, 8}), tt(DType::F32, {1, 3, 2}), tt(DType::F32, {1, 3, 2})}, 1, a);
  ASSERT_EQ(errorText(passes::specialize(ok->g, {})), "");
  EXPECT_EQ(outputType(*ok, 0), "f32[2,3,8]");
  a.set("rotary_embedding_dim", Attr::ofInt(6)); // head size is 4
  auto bad =
      oneOp("RotaryEmbedding", {tt(DType::F32, {2, 3, 8}), tt(DType::F32, {1, 3, 3}), tt(DType::F32, {1, 3, 3})}, 1, a);
  EXPECT_NE(errorText(passes::specialize(bad->g, {})).find("rotary_embedding_dim 6"), std::string::npos);
}

} // namespace
