// CUDA Softmax, LogSoftmax, megac.SoftmaxGrad and megac.LogSoftmaxGrad
// against the CPU kernels.
#include "RowOpsTestUtil.h"

#include <cmath>
#include <optional>

namespace megac::gputest {
namespace {

OpCase softmaxCase(const std::string &op, Tensor x, std::optional<int64_t> axis) {
  OpCase c;
  c.op = op;
  if (axis) c.attrs = makeAttrs({{"axis", Attr::ofInt(*axis)}});
  c.outputs = {{x.dtype(), x.shape()}};
  c.inputs = {std::move(x)};
  return c;
}

OpCase gradCase(const std::string &op, Tensor dy, Tensor y, std::optional<int64_t> axis) {
  OpCase c;
  c.op = op;
  if (axis) c.attrs = makeAttrs({{"axis", Attr::ofInt(*axis)}});
  c.outputs = {{y.dtype(), y.shape()}};
  c.inputs = {std::move(dy), std::move(y)};
  return c;
}

void expectForward(const Shape &shape, std::optional<int64_t> axis, unsigned seed, double lo = -3, double hi = 3) {
  Tensor x = randomTensor(shape, seed, DType::F32, lo, hi);
  for (const char *op : {"Softmax", "LogSoftmax"}) {
    SCOPED_TRACE(std::string(op) + " " + shapeToString(shape) + " axis " + (axis ? std::to_string(*axis) : "default"));
    EXPECT_GPU_MATCHES_CPU(softmaxCase(op, x, axis), gpu(), 1e-5);
  }
}

// Y is the forward op's output, as the gradient ops receive it.
void expectGrad(const Shape &shape, std::optional<int64_t> axis, unsigned seed) {
  Tensor x = randomTensor(shape, seed, DType::F32, -3, 3), dy = randomTensor(shape, seed + 1);
  for (bool isLog : {false, true}) {
    OpCase fwd = softmaxCase(isLog ? "LogSoftmax" : "Softmax", x, axis);
    auto r = runOnBoth(fwd, gpu());
    ASSERT_TRUE(r.error.empty()) << r.error;
    const char *op = isLog ? "megac.LogSoftmaxGrad" : "megac.SoftmaxGrad";
    SCOPED_TRACE(std::string(op) + " " + shapeToString(shape));
    EXPECT_GPU_MATCHES_CPU(gradCase(op, dy, r.cpu[0], axis), gpu(), 1e-5);
  }
}

TEST(SoftmaxGpu, LastAxisRowLengths) {
  // Each side of the warp/block, registers/streamed boundaries.
  for (int64_t n : {1, 3, 32, 33, 512, 513, 1000, 4096, 4097, 8193, 16384, 16385, 50000})
    expectForward({3, n}, -1, unsigned(n));
}

// Few long rows are split across blocks; many are streamed a block each.
TEST(SoftmaxGpu, LongRows) {
  expectForward({2, 131072}, 1, 7);
  expectForward({100, 40000}, -1, 6);
  expectForward({300, 20000}, -1, 5);
}

TEST(SoftmaxGpu, DefaultAxisIsLast) { expectForward({4, 5, 6}, std::nullopt, 8); }

TEST(SoftmaxGpu, OtherAxes) {
  expectForward({4, 37, 5}, 1, 9);
  expectForward({4, 37, 5}, -2, 10);
  expectForward({1000, 3}, 0, 11);
  expectForward({3, 1000}, -2, 12);
  expectForward({2, 3, 4, 5}, 0, 13);
}

TEST(SoftmaxGpu, ScalarInput) { expectForward({}, -1, 14); }

TEST(SoftmaxGpu, LargeLogitsStayFinite) { expectForward({8, 2000}, -1, 15, -80, 80); }

// Masked entries (-inf) get probability 0; an all -inf row is NaN, as on the CPU.
TEST(SoftmaxGpu, MaskedRows) {
  for (int64_t n : {7, 3000}) {
    Tensor x = randomTensor({3, n}, 16);
    float *p = x.data<float>();
    for (int64_t i = 0; i < n; i += 2) p[i] = -INFINITY; // row 0: every other entry masked, starting with the first
    for (int64_t i = 0; i < n; ++i) p[2 * n + i] = -INFINITY; // row 2: fully masked
    EXPECT_GPU_MATCHES_CPU(softmaxCase("Softmax", x, -1), gpu(), 1e-5);
    Tensor xt = randomTensor({n, 3}, 17);
    for (int64_t i = 0; i < n; i += 2) xt.data<float>()[i * 3] = -INFINITY;
    EXPECT_GPU_MATCHES_CPU(softmaxCase("Softmax", xt, 0), gpu(), 1e-5);
  }
}

TEST(SoftmaxGpu, GradLastAxis) {
  for (int64_t n : {1, 3, 512, 513, 1000, 16384, 16385, 50000}) expectGrad({3, n}, -1, unsigned(100 + n));
}

TEST(SoftmaxGpu, GradOtherAxes) {
  expectGrad({4, 37, 5}, 1, 200);
  expectGrad({1000, 3}, 0, 201);
  expectGrad({2, 3, 4}, -3, 202);
  expectGrad({6, 7}, std::nullopt, 203);
}

TEST(SoftmaxGpu, ManyRows) {
  expectForward({4096, 257}, -1, 300);
  expectGrad({4096, 257}, -1, 301);
}

TEST(SoftmaxGpu, UnsupportedTypeIsAnError) {
  Tensor x = randomTensor({3, 4}, 400, DType::F64);
  EXPECT_GPU_ERROR(softmaxCase("Softmax", x, -1), gpu(), "unsupported element type");
  EXPECT_GPU_ERROR(gradCase("megac.SoftmaxGrad", x, x, -1), gpu(), "unsupported element type");
}

} // namespace
} // namespace megac::gputest
