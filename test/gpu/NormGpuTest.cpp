// CUDA LayerNormalization, RMSNormalization and their megac.*Grad ops
// against the CPU kernels.
#include "RowOpsTestUtil.h"

namespace megac::gputest {
namespace {

int64_t normAxis(const Shape &x, int64_t axis) { return axis < 0 ? axis + int64_t(x.size()) : axis; }

Shape statShape(const Shape &x, int64_t axis) {
  Shape s = x;
  for (size_t d = size_t(normAxis(x, axis)); d < s.size(); ++d) s[d] = 1;
  return s;
}

struct NormOptions {
  int64_t axis = -1;
  bool bias = true;
  bool stats = true;     // ask for Mean and InvStdDev (LayerNormalization)
  int64_t stashType = 1; // their dtype
  float epsilon = 0;     // 0: the default
};

// Scale (and B) cover the normalized dims unless a shape is given.
OpCase layerNormCase(const Shape &x, const NormOptions &o, unsigned seed, Shape scaleShape = {}, Shape biasShape = {}) {
  const int64_t axis = normAxis(x, o.axis);
  Shape normalized(x.begin() + axis, x.end());
  OpCase c;
  c.op = "LayerNormalization";
  c.attrs = makeAttrs({{"axis", Attr::ofInt(o.axis)}, {"stash_type", Attr::ofInt(o.stashType)}});
  if (o.epsilon) c.attrs.set("epsilon", Attr::ofFloat(o.epsilon));
  c.inputs = {randomTensor(x, seed, DType::F32, -2, 2),
              randomTensor(scaleShape.empty() ? normalized : scaleShape, seed + 1, DType::F32, 0.5, 1.5),
              o.bias ? randomTensor(biasShape.empty() ? normalized : biasShape, seed + 2) : Tensor()};
  DType stash = DType(int32_t(o.stashType));
  c.outputs = {{DType::F32, x},
               {o.stats ? stash : DType::Undefined, statShape(x, axis)},
               {o.stats ? stash : DType::Undefined, statShape(x, axis)}};
  return c;
}

OpCase rmsNormCase(const Shape &x, const NormOptions &o, unsigned seed, Shape scaleShape = {}) {
  const int64_t axis = normAxis(x, o.axis);
  Shape normalized(x.begin() + axis, x.end());
  OpCase c;
  c.op = "RMSNormalization";
  c.attrs = makeAttrs({{"axis", Attr::ofInt(o.axis)}});
  if (o.epsilon) c.attrs.set("epsilon", Attr::ofFloat(o.epsilon));
  c.inputs = {randomTensor(x, seed, DType::F32, -2, 2),
              randomTensor(scaleShape.empty() ? normalized : scaleShape, seed + 1, DType::F32, 0.5, 1.5)};
  c.outputs = {{DType::F32, x}};
  return c;
}

OpCase normGradCase(const std::string &op, const Shape &x, int64_t axis, unsigned seed, Shape scaleShape = {},
                    float epsilon = 0) {
  Shape normalized(x.begin() + normAxis(x, axis), x.end());
  Shape scale = scaleShape.empty() ? normalized : scaleShape;
  OpCase c;
  c.op = op;
  c.attrs = makeAttrs({{"axis", Attr::ofInt(axis)}});
  if (epsilon) c.attrs.set("epsilon", Attr::ofFloat(epsilon));
  c.inputs = {randomTensor(x, seed), randomTensor(x, seed + 1, DType::F32, -2, 2),
              randomTensor(scale, seed + 2, DType::F32, 0.5, 1.5)};
  c.outputs = {{DType::F32, x}, {DType::F32, scale}};
  return c;
}

// dScale sums over every row: fp32 accumulation on the GPU.
double gradTol(const Shape &x) { return numElements(x) > 1000000 ? 2e-4 : 2e-5; }

TEST(NormGpu, LayerNormRowLengths) {
  for (int64_t n : {1, 3, 32, 512, 513, 1000, 4097, 8193, 16384, 16385, 50000}) {
    SCOPED_TRACE(n);
    EXPECT_GPU_MATCHES_CPU(layerNormCase({3, n}, {}, unsigned(n)), gpu(), 1e-5);
  }
}

TEST(NormGpu, LayerNormOptions) {
  NormOptions noBias;
  noBias.bias = false;
  EXPECT_GPU_MATCHES_CPU(layerNormCase({5, 64}, noBias, 1), gpu(), 1e-5);
  NormOptions noStats;
  noStats.stats = false;
  EXPECT_GPU_MATCHES_CPU(layerNormCase({5, 64}, noStats, 2), gpu(), 1e-5);
  NormOptions f64Stats;
  f64Stats.stashType = 11;
  EXPECT_GPU_MATCHES_CPU(layerNormCase({5, 64}, f64Stats, 3), gpu(), 1e-5);
  NormOptions eps;
  eps.epsilon = 0.25f;
  EXPECT_GPU_MATCHES_CPU(layerNormCase({5, 64}, eps, 4), gpu(), 1e-5);
}

TEST(NormGpu, LayerNormAxes) {
  for (int64_t axis : {0, 1, 2, -1, -2, -3}) {
    NormOptions o;
    o.axis = axis;
    SCOPED_TRACE(axis);
    EXPECT_GPU_MATCHES_CPU(layerNormCase({2, 3, 40}, o, unsigned(10 + axis + 3)), gpu(), 1e-5);
  }
}

// Scale and B broadcast within the normalized dims, or varying over rows.
TEST(NormGpu, LayerNormBroadcastParams) {
  NormOptions o;
  o.axis = 1;
  EXPECT_GPU_MATCHES_CPU(layerNormCase({2, 3, 40}, o, 20, {40}, {1}), gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(layerNormCase({2, 3, 40}, o, 21, {2, 1, 40}, {2, 3, 40}), gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(layerNormCase({2, 3, 40}, o, 22, {1, 3, 40}, {3, 1}), gpu(), 1e-5);
  NormOptions last;
  EXPECT_GPU_MATCHES_CPU(layerNormCase({6, 700}, last, 23, {6, 700}), gpu(), 1e-5);
}

TEST(NormGpu, LayerNormManyRows) {
  EXPECT_GPU_MATCHES_CPU(layerNormCase({4096, 2560}, {}, 30), gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(layerNormCase({20000, 96}, {}, 31), gpu(), 1e-5);
}

TEST(NormGpu, RMSNorm) {
  for (int64_t n : {1, 3, 1000, 16385, 50000}) {
    SCOPED_TRACE(n);
    EXPECT_GPU_MATCHES_CPU(rmsNormCase({3, n}, {}, unsigned(40 + n)), gpu(), 1e-5);
  }
  for (int64_t axis : {0, 1, -1}) {
    NormOptions o;
    o.axis = axis;
    EXPECT_GPU_MATCHES_CPU(rmsNormCase({2, 3, 40}, o, 41), gpu(), 1e-5);
  }
  NormOptions o;
  o.axis = 1;
  o.epsilon = 0.5f;
  EXPECT_GPU_MATCHES_CPU(rmsNormCase({2, 3, 40}, o, 42, {40}), gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(rmsNormCase({2, 3, 40}, o, 43, {2, 1, 1}), gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(rmsNormCase({4096, 3072}, {}, 44), gpu(), 1e-5);
}

TEST(NormGpu, Grads) {
  for (const char *op : {"megac.LayerNormalizationGrad", "megac.RMSNormalizationGrad"}) {
    SCOPED_TRACE(op);
    for (int64_t n : {1, 3, 257, 1000, 4097, 16384, 16385, 50000}) {
      SCOPED_TRACE(n);
      EXPECT_GPU_MATCHES_CPU(normGradCase(op, {3, n}, -1, unsigned(n)), gpu(), 2e-5);
    }
    EXPECT_GPU_MATCHES_CPU(normGradCase(op, {2, 3, 40}, 1, 50), gpu(), 2e-5);
    EXPECT_GPU_MATCHES_CPU(normGradCase(op, {2, 3, 40}, 0, 51), gpu(), 2e-5);
    EXPECT_GPU_MATCHES_CPU(normGradCase(op, {2, 3, 40}, -1, 52, {}, 0.1f), gpu(), 2e-5);
  }
}

// Scale broadcast within the rows: dY * xhat is stored whole, then summed down.
TEST(NormGpu, GradsBroadcastScale) {
  for (const char *op : {"megac.LayerNormalizationGrad", "megac.RMSNormalizationGrad"}) {
    SCOPED_TRACE(op);
    EXPECT_GPU_MATCHES_CPU(normGradCase(op, {2, 3, 40}, 1, 60, {40}), gpu(), 2e-5);
    EXPECT_GPU_MATCHES_CPU(normGradCase(op, {2, 3, 40}, 1, 61, {2, 1, 40}), gpu(), 2e-5);
    EXPECT_GPU_MATCHES_CPU(normGradCase(op, {2, 3, 40}, -1, 62, {1}), gpu(), 2e-5);
    EXPECT_GPU_MATCHES_CPU(normGradCase(op, {2, 3, 40}, -1, 63, {1, 1, 40}), gpu(), 2e-5);
  }
}

// Many rows: per-block partial sums of dScale, then a column reduction.
TEST(NormGpu, GradsManyRows) {
  for (const char *op : {"megac.LayerNormalizationGrad", "megac.RMSNormalizationGrad"}) {
    SCOPED_TRACE(op);
    for (Shape x : {Shape{5000, 300}, Shape{4, 2048, 2560}, Shape{1500, 7}, Shape{1100, 16500}}) {
      SCOPED_TRACE(shapeToString(x));
      EXPECT_GPU_MATCHES_CPU(normGradCase(op, x, -1, 70), gpu(), gradTol(x));
    }
  }
}

TEST(NormGpu, UnsupportedTypeIsAnError) {
  OpCase c = layerNormCase({3, 8}, {}, 80);
  for (Tensor &t : c.inputs) t = convertTo(t, DType::F64);
  c.outputs[0].first = DType::F64;
  EXPECT_GPU_ERROR(c, gpu(), "unsupported element type");
  OpCase g = normGradCase("megac.RMSNormalizationGrad", {3, 8}, -1, 81);
  for (Tensor &t : g.inputs) t = convertTo(t, DType::F64);
  g.outputs = {{DType::F64, {3, 8}}, {DType::F64, {8}}};
  EXPECT_GPU_ERROR(g, gpu(), "unsupported element type");
}

} // namespace
} // namespace megac::gputest
