// CUDA megac.SoftmaxCrossEntropy and megac.SoftmaxCrossEntropyGrad against
// the CPU kernels.
#include "RowOpsTestUtil.h"

#include <cmath>
#include <cstring>
#include <optional>

namespace megac::gputest {
namespace {

// Targets in [0, v), every `ignoreEvery`-th one set to `ignore`.
Tensor targetsFor(const Shape &shape, int64_t v, unsigned seed, int64_t ignore = -100, int64_t ignoreEvery = 0) {
  Tensor t = randomTensor(shape, seed, DType::I64, 0, double(v));
  if (ignoreEvery > 0)
    for (int64_t i = 0; i < t.numel(); i += ignoreEvery) t.data<int64_t>()[i] = ignore;
  return t;
}

Shape logitsShape(const Shape &targets, int64_t v) {
  Shape s = targets;
  s.push_back(v);
  return s;
}

OpCase lossCase(Tensor logits, Tensor targets, std::optional<int64_t> ignore) {
  OpCase c;
  c.op = "megac.SoftmaxCrossEntropy";
  if (ignore) c.attrs = makeAttrs({{"ignore_index", Attr::ofInt(*ignore)}});
  c.inputs = {std::move(logits), std::move(targets)};
  c.outputs = {{DType::F32, {}}};
  return c;
}

OpCase lossGradCase(float dloss, Tensor logits, Tensor targets, std::optional<int64_t> ignore) {
  OpCase c;
  c.op = "megac.SoftmaxCrossEntropyGrad";
  if (ignore) c.attrs = makeAttrs({{"ignore_index", Attr::ofInt(*ignore)}});
  c.outputs = {{DType::F32, logits.shape()}};
  c.inputs = {Tensor::scalar(dloss), std::move(logits), std::move(targets)};
  return c;
}

void expectBoth(const Shape &targetShape, int64_t v, unsigned seed, std::optional<int64_t> ignore = std::nullopt,
                int64_t ignoreEvery = 0, DType targetType = DType::I64, double lossTol = 1e-5) {
  SCOPED_TRACE("targets " + shapeToString(targetShape) + " V=" + std::to_string(v));
  Tensor logits = randomTensor(logitsShape(targetShape, v), seed, DType::F32, -4, 4);
  Tensor targets = convertTo(targetsFor(targetShape, v, seed + 1, ignore.value_or(-100), ignoreEvery), targetType);
  EXPECT_GPU_MATCHES_CPU(lossCase(logits, targets, ignore), gpu(), lossTol);
  EXPECT_GPU_MATCHES_CPU(lossGradCase(0.7f, logits, targets, ignore), gpu(), 1e-6);
}

TEST(LossGpu, VocabularySizes) {
  for (int64_t v : {1, 3, 1000, 50000}) expectBoth({4, 7}, v, unsigned(v));
}

TEST(LossGpu, LargeVocabularies) {
  expectBoth({3, 2}, 152064, 1); // float4 rows
  expectBoth({5}, 50257, 2);     // rows not a multiple of 4 floats
}

TEST(LossGpu, IgnoreIndex) {
  expectBoth({4, 7}, 1000, 3, std::nullopt, 3); // the default -100
  expectBoth({4, 7}, 1000, 4, -1, 2);
  expectBoth({4, 7}, 1000, 5, 7, 4); // an ignore_index inside the vocabulary
}

TEST(LossGpu, EverythingIgnoredGivesZero) { expectBoth({3, 5}, 100, 6, std::nullopt, 1); }

TEST(LossGpu, Int32Targets) { expectBoth({4, 7}, 1000, 7, -100, 5, DType::I32); }

TEST(LossGpu, OneDimensionalLogits) {
  Tensor logits = randomTensor({10}, 8);
  Tensor target = int64s({}, {3});
  EXPECT_GPU_MATCHES_CPU(lossCase(logits, target, std::nullopt), gpu(), 1e-6);
  EXPECT_GPU_MATCHES_CPU(lossGradCase(1.f, logits, target, std::nullopt), gpu(), 1e-6);
}

TEST(LossGpu, ManyRows) { expectBoth({16, 1024}, 4096, 9, std::nullopt, 7); }

// The mean over rows is reduced in a fixed order: identical bits every run.
TEST(LossGpu, Deterministic) {
  Tensor logits = randomTensor({256, 50000}, 10, DType::F32, -4, 4);
  Tensor targets = targetsFor({256}, 50000, 11, -100, 5);
  OpCase c = lossCase(logits, targets, std::nullopt);
  auto a = runGpuOnly(c, gpu()), b = runGpuOnly(c, gpu());
  ASSERT_TRUE(a.error.empty() && b.error.empty()) << a.error << b.error;
  EXPECT_TRUE(a.outputs[0].identical(b.outputs[0]));
  OpCase g = lossGradCase(1.f, logits, targets, std::nullopt);
  auto ga = runGpuOnly(g, gpu()), gb = runGpuOnly(g, gpu());
  ASSERT_TRUE(ga.error.empty() && gb.error.empty()) << ga.error << gb.error;
  EXPECT_TRUE(ga.outputs[0].identical(gb.outputs[0]));
}

// The CPU rejects a target outside the vocabulary; the GPU makes the loss
// and that row's gradient NaN (documented in LossKernels.cu).
TEST(LossGpu, OutOfRangeTargetGivesNaN) {
  Tensor logits = randomTensor({3, 10}, 12);
  Tensor targets = int64s({3}, {2, 10, -100});
  auto r = runGpuOnly(lossCase(logits, targets, std::nullopt), gpu());
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_TRUE(std::isnan(r.outputs[0].data<float>()[0]));
  auto g = runGpuOnly(lossGradCase(1.f, logits, targets, std::nullopt), gpu());
  ASSERT_TRUE(g.error.empty()) << g.error;
  const float *d = g.outputs[0].data<float>();
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_TRUE(std::isfinite(d[i])) << i;
    EXPECT_TRUE(std::isnan(d[10 + i])) << i;
    EXPECT_EQ(d[20 + i], 0.f) << i;
  }
}

TEST(LossGpu, UnsupportedTypeIsAnError) {
  Tensor logits = randomTensor({3, 10}, 13, DType::F64);
  Tensor targets = int64s({3}, {1, 2, 3});
  OpCase c = lossCase(logits, targets, std::nullopt);
  c.outputs[0].first = DType::F64;
  EXPECT_GPU_ERROR(c, gpu(), "unsupported element type");
}

} // namespace
} // namespace megac::gputest
