// CUDA Reduce* and megac.SumToShape against the CPU kernels.
#include "RowOpsTestUtil.h"

#include <cmath>
#include <optional>

namespace megac::gputest {
namespace {

const char *const kReduceOps[] = {"ReduceSum",       "ReduceMean", "ReduceMax", "ReduceMin",
                                  "ReduceSumSquare", "ReduceL1",   "ReduceL2"};

// The output shape ONNX gives for these axes (all when none).
Shape reducedShape(const Shape &x, const std::optional<std::vector<int64_t>> &axes, bool keepdims) {
  const int64_t rank = int64_t(x.size());
  std::vector<bool> red(x.size(), !axes || axes->empty());
  if (axes)
    for (int64_t a : *axes) red[size_t(a < 0 ? a + rank : a)] = true;
  Shape out;
  for (size_t d = 0; d < x.size(); ++d) {
    if (!red[d]) out.push_back(x[d]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

OpCase reduceCase(const std::string &op, Tensor x, std::optional<std::vector<int64_t>> axes, bool keepdims = true) {
  OpCase c;
  c.op = op;
  c.attrs = makeAttrs({{"keepdims", Attr::ofInt(keepdims)}});
  Shape out = reducedShape(x.shape(), axes, keepdims);
  c.outputs = {{x.dtype(), out}};
  c.inputs.push_back(std::move(x));
  c.constant = {false, true};
  if (axes) c.inputs.push_back(int64s({int64_t(axes->size())}, *axes));
  return c;
}

// Sums of many values accumulate in fp32 on the GPU (double on the CPU).
double tolFor(int64_t reduced) { return reduced > 4096 ? 1e-4 : 2e-5; }

void expectAllOps(const Shape &shape, const std::vector<int64_t> &axes, unsigned seed) {
  Tensor x = randomTensor(shape, seed);
  int64_t reduced = 1;
  for (int64_t a : axes) reduced *= shape[size_t(a < 0 ? a + int64_t(shape.size()) : a)];
  for (const char *op : kReduceOps)
    for (bool keep : {true, false}) {
      SCOPED_TRACE(std::string(op) + " " + shapeToString(shape) + (keep ? " keepdims" : ""));
      EXPECT_GPU_MATCHES_CPU(reduceCase(op, x, axes, keep), gpu(), tolFor(reduced));
    }
}

TEST(ReductionGpu, LastAxis) { expectAllOps({3, 1000}, {-1}, 1); }
TEST(ReductionGpu, FirstAxis) { expectAllOps({1000, 3}, {0}, 2); }
TEST(ReductionGpu, MiddleAxisOddInner) { expectAllOps({4, 50, 33}, {1}, 3); }
TEST(ReductionGpu, SmallInner) { expectAllOps({5, 200, 3}, {-2}, 4); }
TEST(ReductionGpu, ContiguousAxes) { expectAllOps({2, 3, 4, 5}, {1, 2}, 5); }
TEST(ReductionGpu, NonContiguousAxes) {
  expectAllOps({3, 4, 5, 6}, {0, 2}, 6);
  expectAllOps({3, 4, 5, 6}, {1, -1}, 7);
  expectAllOps({2, 3, 2, 3, 2, 3}, {0, 2, 4}, 8);
}
TEST(ReductionGpu, ExtentOneDimsAreSkipped) { expectAllOps({1, 7, 1, 9, 1}, {1, 2}, 9); }

TEST(ReductionGpu, AllAxesWithoutAxesInput) {
  Tensor x = randomTensor({7, 11, 13}, 10);
  for (const char *op : kReduceOps)
    for (bool keep : {true, false}) {
      SCOPED_TRACE(op);
      EXPECT_GPU_MATCHES_CPU(reduceCase(op, x, std::nullopt, keep), gpu(), 2e-5);
    }
}

TEST(ReductionGpu, EmptyAxesReducesAll) {
  Tensor x = randomTensor({6, 5}, 11);
  OpCase c = reduceCase("ReduceSum", x, std::vector<int64_t>{}, false);
  EXPECT_EQ(c.outputs[0].second, Shape{});
  EXPECT_GPU_MATCHES_CPU(c, gpu(), 1e-5);
}

TEST(ReductionGpu, NoopWithEmptyAxesCopies) {
  Tensor x = randomTensor({6, 5}, 12);
  for (const char *op : kReduceOps) {
    OpCase c = reduceCase(op, x, std::nullopt);
    c.attrs.set("noop_with_empty_axes", Attr::ofInt(1));
    c.outputs = {{DType::F32, x.shape()}};
    EXPECT_GPU_MATCHES_CPU(c, gpu(), 0.0);
  }
}

TEST(ReductionGpu, RowLengths) {
  for (int64_t n : {1, 3, 31, 33, 1000, 1025, 50000}) {
    Tensor x = randomTensor({3, n}, unsigned(20 + n));
    for (const char *op : kReduceOps) {
      SCOPED_TRACE(std::string(op) + " n=" + std::to_string(n));
      EXPECT_GPU_MATCHES_CPU(reduceCase(op, x, std::vector<int64_t>{1}), gpu(), tolFor(n));
    }
  }
}

TEST(ReductionGpu, ColumnLengths) {
  for (int64_t n : {1, 3, 1000, 50000}) {
    Tensor x = randomTensor({n, 5}, unsigned(30 + n));
    for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
      SCOPED_TRACE(std::string(op) + " n=" + std::to_string(n));
      EXPECT_GPU_MATCHES_CPU(reduceCase(op, x, std::vector<int64_t>{0}, false), gpu(), tolFor(n));
    }
  }
}

// One long row: split across blocks with a second pass.
TEST(ReductionGpu, HugeSingleRow) {
  Tensor x = randomTensor({1, 3000000}, 40);
  for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2"})
    EXPECT_GPU_MATCHES_CPU(reduceCase(op, x, std::vector<int64_t>{1}), gpu(), 1e-4);
  EXPECT_GPU_MATCHES_CPU(reduceCase("ReduceSum", x, std::nullopt, false), gpu(), 1e-4);
}

// The bias gradient shape: few outputs, a long reduced dim of columns.
TEST(ReductionGpu, BiasGradientShape) {
  Tensor x = randomTensor({16384, 3072}, 41);
  EXPECT_GPU_MATCHES_CPU(reduceCase("ReduceSum", x, std::vector<int64_t>{0}, false), gpu(), 1e-4);
  EXPECT_GPU_MATCHES_CPU(reduceCase("ReduceMax", x, std::vector<int64_t>{0}, true), gpu(), 0.0);
}

TEST(ReductionGpu, SplitColumnsWithOuter) {
  Tensor x = randomTensor({4, 20000, 7}, 42);
  for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMin", "ReduceSumSquare"})
    EXPECT_GPU_MATCHES_CPU(reduceCase(op, x, std::vector<int64_t>{1}), gpu(), 1e-4);
}

TEST(ReductionGpu, IntegerTypes) {
  for (DType dt : {DType::I64, DType::I32}) {
    Tensor x = randomTensor({5, 300}, 43, dt, -50, 50);
    for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1"})
      for (int64_t axis : {0, 1}) {
        SCOPED_TRACE(std::string(op) + " " + dtypeName(dt));
        EXPECT_GPU_MATCHES_CPU(reduceCase(op, x, std::vector<int64_t>{axis}), gpu(), 0.0);
      }
  }
}

TEST(ReductionGpu, MaxAndMinPropagateNaN) {
  Tensor x = randomTensor({4, 100}, 44);
  x.data<float>()[1 * 100 + 17] = NAN;
  for (const char *op : {"ReduceMax", "ReduceMin"})
    for (int64_t axis : {0, 1}) EXPECT_GPU_MATCHES_CPU(reduceCase(op, x, std::vector<int64_t>{axis}), gpu(), 0.0);
}

// An empty reduced dim gives the identity: 0 for sums, NaN for a mean.
TEST(ReductionGpu, EmptyReducedDim) {
  Tensor x(DType::F32, {3, 0, 4});
  for (const char *op : {"ReduceSum", "ReduceMean", "ReduceSumSquare"})
    EXPECT_GPU_MATCHES_CPU(reduceCase(op, x, std::vector<int64_t>{1}), gpu(), 0.0);
}

// --- SumToShape ---

OpCase sumToShapeCase(Tensor x, Shape target) {
  OpCase c;
  c.op = "megac.SumToShape";
  c.attrs = makeAttrs({{"shape", Attr::ofInts(target)}});
  c.outputs = {{DType::F32, target}};
  c.inputs = {std::move(x)};
  return c;
}

TEST(ReductionGpu, SumToShape) {
  Tensor x = randomTensor({2, 3, 4}, 50);
  for (Shape target : {Shape{3, 1}, Shape{4}, Shape{1, 4}, Shape{2, 1, 4}, Shape{2, 3, 4}, Shape{1}, Shape{},
                       Shape{3, 4}, Shape{2, 3, 1}}) {
    SCOPED_TRACE(shapeToString(target));
    EXPECT_GPU_MATCHES_CPU(sumToShapeCase(x, target), gpu(), 1e-5);
  }
  Tensor y = randomTensor({5, 1, 6}, 51);
  EXPECT_GPU_MATCHES_CPU(sumToShapeCase(y, {1, 6}), gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(sumToShapeCase(y, {5, 1, 1}), gpu(), 1e-5);
}

TEST(ReductionGpu, SumToShapeBiasGradient) {
  Tensor x = randomTensor({8, 2048, 3072}, 52);
  EXPECT_GPU_MATCHES_CPU(sumToShapeCase(x, {3072}), gpu(), 1e-4);
  EXPECT_GPU_MATCHES_CPU(sumToShapeCase(x, {1, 1, 3072}), gpu(), 1e-4);
}

// --- Errors ---

TEST(ReductionGpu, AxesMustBeConstant) {
  OpCase c = reduceCase("ReduceSum", randomTensor({3, 4}, 60), std::vector<int64_t>{1});
  c.constant = {false, false};
  EXPECT_GPU_ERROR(c, gpu(), "must be a constant");
}

TEST(ReductionGpu, UnsupportedTypeIsAnError) {
  EXPECT_GPU_ERROR(reduceCase("ReduceSum", randomTensor({3, 4}, 61, DType::F64), std::vector<int64_t>{1}), gpu(),
                   "unsupported element type");
  EXPECT_GPU_ERROR(reduceCase("ReduceL2", randomTensor({3, 4}, 62, DType::I64, -5, 5), std::vector<int64_t>{1}),
                   gpu(), "unsupported element type");
  OpCase s = sumToShapeCase(randomTensor({3, 4}, 63, DType::F64), {4});
  s.outputs = {{DType::F64, {4}}};
  EXPECT_GPU_ERROR(s, gpu(), "unsupported element type");
}

} // namespace
} // namespace megac::gputest
