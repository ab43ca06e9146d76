// Softmax / LogSoftmax CPU kernels: hand-computed values, every axis of a
// random tensor against a double-precision reference, stability and the
// all -inf case.
#include "runtime/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace megac;
using namespace megac::cpu;

namespace {

Tensor runSoftmax(const std::string &op, const Tensor &x, int64_t axis, bool setAxis = true) {
  Attrs attrs;
  if (setAxis) attrs.set("axis", Attr::ofInt(axis));
  Tensor out(x.dtype(), x.shape());
  KernelContext ctx{attrs, {&x}, {&out}};
  llvm::Error e = runKernel(op, ctx);
  EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
  return out;
}

// Softmax (or log-softmax) over `axis`, in double: each slice along the axis
// is found from its first element's flat index.
std::vector<double> reference(const Tensor &x, int64_t axis, bool log) {
  const Shape &s = x.shape();
  if (axis < 0) axis += int64_t(s.size());
  int64_t n = s[size_t(axis)], stride = rowMajorStrides(s)[size_t(axis)];
  std::vector<double> out(size_t(x.numel()));
  for (int64_t first = 0; first < x.numel(); ++first) {
    if ((first / stride) % n != 0) continue; // not the start of a slice
    double mx = -INFINITY, sum = 0;
    for (int64_t k = 0; k < n; ++k) mx = std::max(mx, x.getAsDouble(first + k * stride));
    for (int64_t k = 0; k < n; ++k) sum += std::exp(x.getAsDouble(first + k * stride) - mx);
    for (int64_t k = 0; k < n; ++k) {
      double v = x.getAsDouble(first + k * stride) - mx;
      out[size_t(first + k * stride)] = log ? v - std::log(sum) : std::exp(v) / sum;
    }
  }
  return out;
}

} // namespace

TEST(SoftmaxKernel, HandComputed) {
  Tensor x = Tensor::fromVector<float>(DType::F32, {1, 3}, {1, 2, 3});
  Tensor y = runSoftmax("Softmax", x, -1, /*setAxis=*/false); // default axis is -1
  EXPECT_NEAR(y.data<float>()[0], 0.09003057f, 1e-7);
  EXPECT_NEAR(y.data<float>()[1], 0.24472847f, 1e-7);
  EXPECT_NEAR(y.data<float>()[2], 0.66524096f, 1e-7);
  Tensor l = runSoftmax("LogSoftmax", x, 1);
  EXPECT_NEAR(l.data<float>()[0], -2.40760596f, 1e-6);
  EXPECT_NEAR(l.data<float>()[2], -0.40760596f, 1e-6);
}

TEST(SoftmaxKernel, EveryAxisMatchesReference) {
  Tensor x(DType::F32, {3, 4, 5, 6});
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> d(-5.0f, 5.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(rng);
  for (const char *op : {"Softmax", "LogSoftmax"})
    for (int64_t axis = -4; axis < 4; ++axis) {
      Tensor y = runSoftmax(op, x, axis);
      std::vector<double> ref = reference(x, axis, std::string(op) == "LogSoftmax");
      for (int64_t i = 0; i < x.numel(); ++i)
        ASSERT_NEAR(y.data<float>()[i], ref[size_t(i)], 2e-6) << op << " axis " << axis << " element " << i;
    }
}

TEST(SoftmaxKernel, LargeRowsUseThreads) {
  Tensor x(DType::F32, {64, 5000});
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(rng);
  Tensor y = runSoftmax("Softmax", x, 1);
  std::vector<double> ref = reference(x, 1, false);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_NEAR(y.data<float>()[i], ref[size_t(i)], 1e-6 * ref[size_t(i)] + 1e-12) << i;
  Tensor col = x.reshaped({5000, 64});
  Tensor z = runSoftmax("LogSoftmax", col, 0);
  std::vector<double> refCol = reference(col, 0, true);
  for (int64_t i = 0; i < col.numel(); ++i) ASSERT_NEAR(z.data<float>()[i], refCol[size_t(i)], 1e-5) << i;
}

TEST(SoftmaxKernel, LargeValuesDoNotOverflow) {
  Tensor x = Tensor::fromVector<float>(DType::F32, {3}, {1000, 1001, 1002});
  Tensor y = runSoftmax("Softmax", x, 0);
  EXPECT_NEAR(y.data<float>()[2], 0.66524096f, 1e-6);
  Tensor l = runSoftmax("LogSoftmax", x, 0);
  EXPECT_NEAR(l.data<float>()[0], -2.40760596f, 1e-5);
}

TEST(SoftmaxKernel, NegativeInfinity) {
  // A masked entry gets probability 0; a fully masked row is NaN (as the spec
  // and PyTorch say; exporters guard it with IsNaN/Where).
  Tensor x = Tensor::fromVector<float>(DType::F32, {2, 2}, {0, -INFINITY, -INFINITY, -INFINITY});
  Tensor y = runSoftmax("Softmax", x, 1);
  EXPECT_EQ(y.data<float>()[0], 1.0f);
  EXPECT_EQ(y.data<float>()[1], 0.0f);
  EXPECT_TRUE(std::isnan(y.data<float>()[2]));
  EXPECT_TRUE(std::isnan(y.data<float>()[3]));
  Tensor l = runSoftmax("LogSoftmax", x, 1);
  EXPECT_EQ(l.data<float>()[0], 0.0f);
  EXPECT_EQ(l.data<float>()[1], -INFINITY);
  EXPECT_TRUE(std::isnan(l.data<float>()[2]));
  Tensor strided = Tensor::fromVector<float>(DType::F32, {2, 2}, {-INFINITY, 0, -INFINITY, 0});
  Tensor s = runSoftmax("Softmax", strided, 0); // column 0 is all -inf
  EXPECT_TRUE(std::isnan(s.data<float>()[0]));
  EXPECT_EQ(s.data<float>()[1], 0.5f);
}

TEST(SoftmaxKernel, DoubleAndHalf) {
  Tensor x = Tensor::fromVector<double>(DType::F64, {2}, {0.0, std::log(3.0)});
  Tensor y = runSoftmax("Softmax", x, 0);
  EXPECT_DOUBLE_EQ(y.data<double>()[0], 0.25);
  EXPECT_DOUBLE_EQ(y.data<double>()[1], 0.75);
  Tensor h(DType::BF16, {2});
  h.data<uint16_t>()[0] = floatToBf16(1.0f);
  h.data<uint16_t>()[1] = floatToBf16(1.0f);
  Tensor hy = runSoftmax("Softmax", h, 0);
  EXPECT_EQ(bf16ToFloat(hy.data<uint16_t>()[0]), 0.5f);
}

TEST(SoftmaxKernel, BadAxisIsAnError) {
  Tensor x(DType::F32, {2, 3});
  Tensor out(DType::F32, {2, 3});
  Attrs attrs;
  attrs.set("axis", Attr::ofInt(2));
  KernelContext ctx{attrs, {&x}, {&out}};
  llvm::Error e = runKernel("Softmax", ctx);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("out of range"), std::string::npos);
}
