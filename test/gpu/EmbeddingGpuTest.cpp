// CUDA Gather, GatherElements and megac.GatherGrad against the CPU kernels.
#include "RowOpsTestUtil.h"

namespace megac::gputest {
namespace {

Shape gatherShape(const Shape &data, const Shape &indices, int64_t axis) {
  if (axis < 0) axis += int64_t(data.size());
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  return out;
}

OpCase gatherCase(Tensor data, Tensor indices, int64_t axis, bool constantIndices = false) {
  OpCase c;
  c.op = "Gather";
  c.attrs = makeAttrs({{"axis", Attr::ofInt(axis)}});
  c.outputs = {{data.dtype(), gatherShape(data.shape(), indices.shape(), axis)}};
  c.inputs = {std::move(data), std::move(indices)};
  c.constant = {false, constantIndices};
  return c;
}

// Indices in [-n, n) (negative ones count from the end).
Tensor indicesFor(Shape shape, int64_t n, unsigned seed, DType dt = DType::I64) {
  return randomTensor(std::move(shape), seed, dt, double(-n), double(n));
}

TEST(EmbeddingGpu, GatherEmbeddingRows) {
  Tensor table = randomTensor({1000, 64}, 1);
  EXPECT_GPU_MATCHES_CPU(gatherCase(table, indicesFor({3, 5}, 1000, 2), 0), gpu(), 0.0);
  EXPECT_GPU_MATCHES_CPU(gatherCase(table, indicesFor({3, 5}, 1000, 3, DType::I32), 0), gpu(), 0.0);
  EXPECT_GPU_MATCHES_CPU(gatherCase(table, indicesFor({7}, 1000, 4), 0, /*constantIndices=*/true), gpu(), 0.0);
}

TEST(EmbeddingGpu, GatherModelSized) {
  Tensor table = randomTensor({50000, 256}, 5);
  EXPECT_GPU_MATCHES_CPU(gatherCase(table, randomTensor({8, 128}, 6, DType::I64, 0, 50000), 0), gpu(), 0.0);
}

TEST(EmbeddingGpu, GatherOtherAxes) {
  Tensor data = randomTensor({3, 50, 7}, 7);
  EXPECT_GPU_MATCHES_CPU(gatherCase(data, indicesFor({4}, 50, 8), 1), gpu(), 0.0);
  EXPECT_GPU_MATCHES_CPU(gatherCase(data, indicesFor({2, 2}, 7, 9), -1), gpu(), 0.0);
  EXPECT_GPU_MATCHES_CPU(gatherCase(data, indicesFor({5}, 3, 10), -3), gpu(), 0.0);
  EXPECT_GPU_MATCHES_CPU(gatherCase(data, indicesFor({2, 3}, 50, 11, DType::I32), -2), gpu(), 0.0);
}

TEST(EmbeddingGpu, GatherScalarIndex) {
  Tensor data = randomTensor({4, 6}, 12);
  EXPECT_GPU_MATCHES_CPU(gatherCase(data, int64s({}, {-1}), 0), gpu(), 0.0);
  EXPECT_GPU_MATCHES_CPU(gatherCase(data, int64s({}, {2}), 1), gpu(), 0.0);
}

// Rows of 1, 2, 3, 8 and 12 bytes: every copy unit.
TEST(EmbeddingGpu, GatherAnyDtype) {
  for (DType dt : {DType::I64, DType::I32, DType::U8, DType::Bool, DType::F16}) {
    SCOPED_TRACE(dtypeName(dt));
    Tensor data = randomTensor({9, 3}, 13, dt, 0, 2);
    EXPECT_GPU_MATCHES_CPU(gatherCase(data, indicesFor({4}, 9, 14), 0), gpu(), 0.0);
    EXPECT_GPU_MATCHES_CPU(gatherCase(data, indicesFor({4}, 3, 15), 1), gpu(), 0.0);
  }
  EXPECT_GPU_MATCHES_CPU(gatherCase(randomTensor({9, 1}, 16, DType::I64, -9, 9), indicesFor({5}, 9, 17), 0),
                         gpu(), 0.0);
}

TEST(EmbeddingGpu, GatherRowSizes) {
  for (int64_t n : {1, 3, 1000, 50000}) {
    Tensor data = randomTensor({5, n}, unsigned(18 + n));
    EXPECT_GPU_MATCHES_CPU(gatherCase(data, indicesFor({6}, 5, 19), 0), gpu(), 0.0);
  }
}

// The CPU rejects an out-of-range index; the GPU writes zeros for it
// (documented in EmbeddingKernels.cu).
TEST(EmbeddingGpu, GatherOutOfRangeGivesZeros) {
  Tensor data = randomTensor({4, 5}, 20);
  OpCase c = gatherCase(data, int64s({3}, {1, 4, -5}), 0);
  auto r = runGpuOnly(c, gpu());
  ASSERT_TRUE(r.error.empty()) << r.error;
  const float *y = r.outputs[0].data<float>(), *x = data.data<float>();
  for (int64_t j = 0; j < 5; ++j) {
    EXPECT_EQ(y[j], x[5 + j]);
    EXPECT_EQ(y[5 + j], 0.f);
    EXPECT_EQ(y[10 + j], 0.f);
  }
}

// --- GatherElements ---

OpCase gatherElementsCase(Tensor data, Tensor indices, int64_t axis) {
  OpCase c;
  c.op = "GatherElements";
  c.attrs = makeAttrs({{"axis", Attr::ofInt(axis)}});
  c.outputs = {{data.dtype(), indices.shape()}};
  c.inputs = {std::move(data), std::move(indices)};
  return c;
}

TEST(EmbeddingGpu, GatherElements) {
  Tensor data = randomTensor({4, 5, 6}, 30);
  EXPECT_GPU_MATCHES_CPU(gatherElementsCase(data, indicesFor({4, 5, 6}, 4, 31), 0), gpu(), 0.0);
  EXPECT_GPU_MATCHES_CPU(gatherElementsCase(data, indicesFor({3, 7, 2}, 5, 32), 1), gpu(), 0.0);
  EXPECT_GPU_MATCHES_CPU(gatherElementsCase(data, indicesFor({4, 5, 9}, 6, 33, DType::I32), -1), gpu(), 0.0);
  Tensor ints = randomTensor({1000, 3}, 34, DType::I64, -100, 100);
  EXPECT_GPU_MATCHES_CPU(gatherElementsCase(ints, indicesFor({1000, 3}, 1000, 35), 0), gpu(), 0.0);
}

// --- GatherGrad ---

OpCase gatherGradCase(const Shape &table, Tensor indices, int64_t axis, unsigned seed) {
  OpCase c;
  c.op = "megac.GatherGrad";
  c.attrs = makeAttrs({{"axis", Attr::ofInt(axis)}, {"shape", Attr::ofInts(table)}});
  c.inputs = {randomTensor(gatherShape(table, indices.shape(), axis), seed), std::move(indices)};
  c.outputs = {{DType::F32, table}};
  return c;
}

TEST(EmbeddingGpu, GatherGradRepeatedIndices) {
  EXPECT_GPU_MATCHES_CPU(gatherGradCase({100, 64}, int64s({2, 5}, {3, 7, 3, -1, 0, 3, 99, 7, 50, 3}), 0, 40),
                         gpu(), 1e-6);
  EXPECT_GPU_MATCHES_CPU(gatherGradCase({100, 64}, int32s({2, 5}, {3, 7, 3, -1, 0, 3, 99, 7, 50, 3}), 0, 41),
                         gpu(), 1e-6);
}

TEST(EmbeddingGpu, GatherGradOtherAxes) {
  EXPECT_GPU_MATCHES_CPU(gatherGradCase({3, 20, 4}, indicesFor({6}, 20, 42), 1, 43), gpu(), 1e-6);
  EXPECT_GPU_MATCHES_CPU(gatherGradCase({3, 20, 4}, indicesFor({2, 3}, 4, 44), -1, 45), gpu(), 1e-6);
  EXPECT_GPU_MATCHES_CPU(gatherGradCase({5, 6}, int64s({}, {-2}), 0, 46), gpu(), 1e-6);
}

TEST(EmbeddingGpu, GatherGradModelSized) {
  // Token ids of a batch: many repeats of a few hundred ids.
  EXPECT_GPU_MATCHES_CPU(gatherGradCase({50000, 256}, randomTensor({8, 512}, 47, DType::I64, 0, 300), 0, 48),
                         gpu(), 1e-5);
}

TEST(EmbeddingGpu, UnsupportedIndexTypeIsAnError) {
  Tensor data = randomTensor({4, 5}, 50);
  EXPECT_GPU_ERROR(gatherCase(data, convertTo(int64s({2}, {1, 2}), DType::I16), 0), gpu(),
                   "are not supported on the GPU");
  OpCase g = gatherGradCase({4, 5}, int64s({2}, {1, 2}), 0, 51);
  g.inputs[0] = convertTo(g.inputs[0], DType::F64);
  g.outputs[0].first = DType::F64;
  EXPECT_GPU_ERROR(g, gpu(), "unsupported element type");
}

} // namespace
} // namespace megac::gputest
