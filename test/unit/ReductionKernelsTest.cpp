// Reduce* and ArgMax/ArgMin CPU kernels: hand-computed cases, and random
// inputs against a naive reference that gathers each output's elements and
// applies the textbook formula in double.
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/ReduceGroups.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

using namespace megac;
using namespace megac::cpu;

namespace {

Tensor f32(Shape s, std::vector<float> v) { return Tensor::fromVector<float>(DType::F32, std::move(s), v); }
Tensor i64(Shape s, std::vector<int64_t> v) { return Tensor::fromVector<int64_t>(DType::I64, std::move(s), v); }
Tensor axesTensor(std::vector<int64_t> a) { return i64({int64_t(a.size())}, a); }

Tensor randomF32(Shape s, unsigned seed, float lo = -2.0f, float hi = 2.0f) {
  Tensor t(DType::F32, std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

Attrs reduceAttrs(int64_t keepdims, int64_t noop = 0) {
  Attrs a;
  a.set("keepdims", Attr::ofInt(keepdims));
  if (noop) a.set("noop_with_empty_axes", Attr::ofInt(noop));
  return a;
}

// Runs `op` with an output of the given dtype and shape; fails the test on error.
Tensor run(const std::string &op, std::vector<const Tensor *> ins, DType outType, Shape outShape, const Attrs &attrs) {
  Tensor out(outType, std::move(outShape));
  KernelContext ctx{attrs, std::move(ins), {&out}};
  llvm::Error e = runKernel(op, ctx);
  EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
  return out;
}

std::string runError(const std::string &op, std::vector<const Tensor *> ins, DType outType, Shape outShape,
                     const Attrs &attrs) {
  Tensor out(outType, std::move(outShape));
  KernelContext ctx{attrs, std::move(ins), {&out}};
  llvm::Error e = runKernel(op, ctx);
  return e ? llvm::toString(std::move(e)) : std::string();
}

std::vector<float> values(const Tensor &t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

// Reference: collect each output's elements, then apply the formula.
std::vector<double> referenceReduce(const std::string &op, const Tensor &x, const std::vector<bool> &reduced) {
  const Shape &s = x.shape();
  Shape outShape;
  for (size_t d = 0; d < s.size(); ++d) outShape.push_back(reduced[d] ? 1 : s[d]);
  std::vector<std::vector<double>> groups(size_t(numElements(outShape)));
  std::vector<int64_t> outStrides = rowMajorStrides(outShape);
  std::vector<int64_t> idx(s.size(), 0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t o = 0, rem = i;
    for (size_t d = s.size(); d-- > 0;) {
      idx[d] = rem % s[d];
      rem /= s[d];
    }
    for (size_t d = 0; d < s.size(); ++d) o += (reduced[d] ? 0 : idx[d]) * outStrides[d];
    groups[size_t(o)].push_back(x.getAsDouble(i));
  }
  std::vector<double> out;
  for (auto &g : groups) {
    double sum = 0, sumSq = 0, sumAbs = 0, prod = 1, sumExp = 0;
    double mx = -INFINITY, mn = INFINITY;
    for (double v : g) {
      sum += v;
      sumSq += v * v;
      sumAbs += std::fabs(v);
      prod *= v;
      sumExp += std::exp(v);
      mx = std::max(mx, v);
      mn = std::min(mn, v);
    }
    double n = double(g.size());
    if (op == "ReduceSum") out.push_back(sum);
    else if (op == "ReduceMean") out.push_back(sum / n);
    else if (op == "ReduceMax") out.push_back(mx);
    else if (op == "ReduceMin") out.push_back(mn);
    else if (op == "ReduceProd") out.push_back(prod);
    else if (op == "ReduceSumSquare") out.push_back(sumSq);
    else if (op == "ReduceL1") out.push_back(sumAbs);
    else if (op == "ReduceL2") out.push_back(std::sqrt(sumSq));
    else if (op == "ReduceLogSum") out.push_back(std::log(sum));
    else if (op == "ReduceLogSumExp") out.push_back(std::log(sumExp));
    else ADD_FAILURE() << "unknown op " << op;
  }
  return out;
}

const char *kReduceOps[] = {"ReduceSum",       "ReduceMean", "ReduceMax", "ReduceMin",    "ReduceProd",
                            "ReduceSumSquare", "ReduceL1",   "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp"};

} // namespace

TEST(ReduceKernels, SumHandComputed) {
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor ax0 = axesTensor({0}), ax1 = axesTensor({-1});
  EXPECT_EQ(values(run("ReduceSum", {&x, &ax0}, DType::F32, {1, 3}, reduceAttrs(1))), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(values(run("ReduceSum", {&x, &ax1}, DType::F32, {2}, reduceAttrs(0))), (std::vector<float>{6, 15}));
  EXPECT_EQ(values(run("ReduceSum", {&x, nullptr}, DType::F32, {1, 1}, reduceAttrs(1))), (std::vector<float>{21}));
  EXPECT_EQ(values(run("ReduceMean", {&x, &ax1}, DType::F32, {2, 1}, reduceAttrs(1))), (std::vector<float>{2, 5}));
  EXPECT_EQ(values(run("ReduceProd", {&x, &ax0}, DType::F32, {3}, reduceAttrs(0))), (std::vector<float>{4, 10, 18}));
  EXPECT_EQ(values(run("ReduceMax", {&x, &ax0}, DType::F32, {3}, reduceAttrs(0))), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(values(run("ReduceMin", {&x, &ax1}, DType::F32, {2}, reduceAttrs(0))), (std::vector<float>{1, 4}));
  EXPECT_EQ(values(run("ReduceSumSquare", {&x, &ax1}, DType::F32, {2}, reduceAttrs(0))),
            (std::vector<float>{14, 77}));
  Tensor neg = f32({2, 2}, {-3, 4, -6, -8});
  EXPECT_EQ(values(run("ReduceL1", {&neg, &ax1}, DType::F32, {2}, reduceAttrs(0))), (std::vector<float>{7, 14}));
  EXPECT_EQ(values(run("ReduceL2", {&neg, &ax1}, DType::F32, {2}, reduceAttrs(0))), (std::vector<float>{5, 10}));
}

TEST(ReduceKernels, EmptyAxesReduceAllOrNothing) {
  Tensor x = f32({2, 2}, {1, 2, 3, 4});
  Tensor empty = axesTensor({});
  EXPECT_EQ(values(run("ReduceSum", {&x, &empty}, DType::F32, {1, 1}, reduceAttrs(1))), (std::vector<float>{10}));
  EXPECT_EQ(values(run("ReduceSum", {&x, &empty}, DType::F32, {2, 2}, reduceAttrs(1, 1))),
            (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(values(run("ReduceMax", {&x, nullptr}, DType::F32, {2, 2}, reduceAttrs(0, 1))),
            (std::vector<float>{1, 2, 3, 4}));
}

TEST(ReduceKernels, RandomAgainstReference) {
  Tensor x = randomF32({3, 4, 5, 2}, 7, 0.1f, 2.0f); // positive: LogSum is defined
  std::vector<std::vector<int64_t>> axesSets = {{0}, {1}, {3}, {-1}, {0, 1}, {1, 2}, {0, 2}, {1, 3}, {0, 3},
                                                {0, 1, 2, 3}, {2, 0}, {-3, -1}};
  for (const char *op : kReduceOps) {
    for (const auto &axes : axesSets) {
      std::vector<bool> reduced(4, false);
      for (int64_t a : axes) reduced[size_t(a < 0 ? a + 4 : a)] = true;
      Shape outShape;
      for (size_t d = 0; d < 4; ++d) outShape.push_back(reduced[d] ? 1 : x.shape()[d]);
      Tensor ax = axesTensor(axes);
      Tensor y = run(op, {&x, &ax}, DType::F32, outShape, reduceAttrs(1));
      std::vector<double> ref = referenceReduce(op, x, reduced);
      ASSERT_EQ(int64_t(ref.size()), y.numel());
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(y.data<float>()[i], ref[i], 1e-5 * std::max(1.0, std::fabs(ref[i])))
            << op << " axes " << shapeToString(axes) << " element " << i;
    }
  }
}

TEST(ReduceKernels, LargeInputsUseThreadsAndMatchReference) {
  Tensor x = randomF32({96, 700, 3}, 11);
  for (std::vector<int64_t> axes : {std::vector<int64_t>{0}, {1}, {2}, {0, 2}, {0, 1}}) {
    std::vector<bool> reduced(3, false);
    for (int64_t a : axes) reduced[size_t(a)] = true;
    Shape outShape;
    for (size_t d = 0; d < 3; ++d)
      if (!reduced[d]) outShape.push_back(x.shape()[d]);
    Tensor ax = axesTensor(axes);
    for (const char *op : {"ReduceSum", "ReduceMax", "ReduceLogSumExp"}) {
      Tensor y = run(op, {&x, &ax}, DType::F32, outShape, reduceAttrs(0));
      std::vector<double> ref = referenceReduce(op, x, reduced);
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(y.data<float>()[i], ref[i], 1e-5 * std::max(1.0, std::fabs(ref[i]))) << op << " " << i;
    }
  }
}

TEST(ReduceKernels, SumAccumulatesBeyondFloatPrecision) {
  // 2^24 + 4096 ones: a float accumulator stops growing at 2^24.
  std::vector<float> v(4097, 1.0f);
  v[0] = 16777216.0f;
  Tensor x = f32({1, 4097}, v);
  Tensor ax = axesTensor({1});
  EXPECT_EQ(run("ReduceSum", {&x, &ax}, DType::F32, {1}, reduceAttrs(0)).data<float>()[0], 16777216.0f + 4096.0f);
  Tensor col = x.reshaped({4097, 1});
  Tensor ax0 = axesTensor({0});
  EXPECT_EQ(run("ReduceSum", {&col, &ax0}, DType::F32, {1}, reduceAttrs(0)).data<float>()[0], 16777216.0f + 4096.0f);
  EXPECT_FLOAT_EQ(run("ReduceMean", {&x, &ax}, DType::F32, {1}, reduceAttrs(0)).data<float>()[0],
                  (16777216.0f + 4096.0f) / 4097.0f);
}

TEST(ReduceKernels, LogSumExpIsStableForLargeValues) {
  Tensor x = f32({2, 2}, {1000, 1000, -1000, -INFINITY});
  Tensor ax = axesTensor({1});
  Tensor y = run("ReduceLogSumExp", {&x, &ax}, DType::F32, {2}, reduceAttrs(0));
  EXPECT_FLOAT_EQ(y.data<float>()[0], 1000.0f + std::log(2.0f));
  EXPECT_FLOAT_EQ(y.data<float>()[1], -1000.0f);
  Tensor allNegInf = f32({2}, {-INFINITY, -INFINITY});
  Tensor ax0 = axesTensor({0});
  EXPECT_EQ(run("ReduceLogSumExp", {&allNegInf, &ax0}, DType::F32, {}, reduceAttrs(0)).data<float>()[0], -INFINITY);
}

TEST(ReduceKernels, MaxAndMinPropagateNaN) {
  Tensor x = f32({2, 3}, {1, NAN, 3, 4, 5, 6});
  Tensor ax = axesTensor({1});
  Tensor mx = run("ReduceMax", {&x, &ax}, DType::F32, {2}, reduceAttrs(0));
  Tensor mn = run("ReduceMin", {&x, &ax}, DType::F32, {2}, reduceAttrs(0));
  EXPECT_TRUE(std::isnan(mx.data<float>()[0]));
  EXPECT_EQ(mx.data<float>()[1], 6.0f);
  EXPECT_TRUE(std::isnan(mn.data<float>()[0]));
  EXPECT_EQ(mn.data<float>()[1], 4.0f);
}

TEST(ReduceKernels, EmptySetGivesIdentity) {
  Tensor x(DType::F32, {2, 0});
  Tensor ax = axesTensor({1});
  EXPECT_EQ(values(run("ReduceSum", {&x, &ax}, DType::F32, {2}, reduceAttrs(0))), (std::vector<float>{0, 0}));
  EXPECT_EQ(values(run("ReduceProd", {&x, &ax}, DType::F32, {2}, reduceAttrs(0))), (std::vector<float>{1, 1}));
  EXPECT_EQ(run("ReduceMax", {&x, &ax}, DType::F32, {2}, reduceAttrs(0)).data<float>()[0], -INFINITY);
  EXPECT_EQ(run("ReduceMin", {&x, &ax}, DType::F32, {2}, reduceAttrs(0)).data<float>()[0], INFINITY);
  EXPECT_EQ(run("ReduceLogSum", {&x, &ax}, DType::F32, {2}, reduceAttrs(0)).data<float>()[0], -INFINITY);
  EXPECT_TRUE(std::isnan(run("ReduceMean", {&x, &ax}, DType::F32, {2}, reduceAttrs(0)).data<float>()[0]));
}

TEST(ReduceKernels, IntegerTypes) {
  Tensor x = Tensor::fromVector<int32_t>(DType::I32, {2, 3}, {1, -2, 3, 4, 5, -7});
  Tensor ax = axesTensor({1});
  auto ints = [](const Tensor &t) { return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel()); };
  EXPECT_EQ(ints(run("ReduceSum", {&x, &ax}, DType::I32, {2}, reduceAttrs(0))), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(ints(run("ReduceProd", {&x, &ax}, DType::I32, {2}, reduceAttrs(0))), (std::vector<int32_t>{-6, -140}));
  EXPECT_EQ(ints(run("ReduceMax", {&x, &ax}, DType::I32, {2}, reduceAttrs(0))), (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(ints(run("ReduceMin", {&x, &ax}, DType::I32, {2}, reduceAttrs(0))), (std::vector<int32_t>{-2, -7}));
  EXPECT_EQ(ints(run("ReduceL1", {&x, &ax}, DType::I32, {2}, reduceAttrs(0))), (std::vector<int32_t>{6, 16}));
  // numpy's mean then a cast to int truncates toward zero: 2/3 -> 0.
  EXPECT_EQ(ints(run("ReduceMean", {&x, &ax}, DType::I32, {2}, reduceAttrs(0))), (std::vector<int32_t>{0, 0}));
  Tensor big = Tensor::fromVector<int64_t>(DType::I64, {2}, {(int64_t(1) << 60) + 1, 3});
  Tensor ax0 = axesTensor({0});
  EXPECT_EQ(run("ReduceSum", {&big, &ax0}, DType::I64, {}, reduceAttrs(0)).data<int64_t>()[0], (int64_t(1) << 60) + 4);
  Tensor flags = Tensor::fromVector<uint8_t>(DType::Bool, {2, 2}, {0, 1, 0, 0});
  Tensor any = run("ReduceMax", {&flags, &ax}, DType::Bool, {2}, reduceAttrs(0));
  EXPECT_EQ(any.data<uint8_t>()[0], 1);
  EXPECT_EQ(any.data<uint8_t>()[1], 0);
}

TEST(ReduceKernels, HalfPrecisionComputesInFloat) {
  Tensor x(DType::F16, {2, 2});
  for (int i = 0; i < 4; ++i) x.data<uint16_t>()[i] = floatToHalf(float(i + 1) * 0.5f);
  Tensor ax = axesTensor({0});
  Tensor y = run("ReduceSum", {&x, &ax}, DType::F16, {2}, reduceAttrs(0));
  EXPECT_EQ(halfToFloat(y.data<uint16_t>()[0]), 2.0f);
  EXPECT_EQ(halfToFloat(y.data<uint16_t>()[1]), 3.0f);
}

TEST(ReduceKernels, BadAxesAreErrors) {
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor outOfRange = axesTensor({2}), repeated = axesTensor({1, -1});
  EXPECT_NE(runError("ReduceSum", {&x, &outOfRange}, DType::F32, {2}, reduceAttrs(0)).find("out of range"),
            std::string::npos);
  EXPECT_NE(runError("ReduceMean", {&x, &repeated}, DType::F32, {2}, reduceAttrs(0)).find("repeated"),
            std::string::npos);
  Tensor ax = axesTensor({1});
  EXPECT_NE(runError("ReduceSum", {&x, &ax}, DType::F32, {3}, reduceAttrs(0)), "");
}

// --- ArgMax / ArgMin ---

namespace {
Attrs argAttrs(int64_t axis, int64_t keepdims, int64_t selectLast) {
  Attrs a;
  a.set("axis", Attr::ofInt(axis));
  a.set("keepdims", Attr::ofInt(keepdims));
  a.set("select_last_index", Attr::ofInt(selectLast));
  return a;
}
std::vector<int64_t> indices(const Tensor &t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}
} // namespace

TEST(ArgReduceKernels, TiesAndSelectLastIndex) {
  Tensor x = f32({2, 3}, {2, 5, 5, 1, 1, 0});
  EXPECT_EQ(indices(run("ArgMax", {&x}, DType::I64, {2, 1}, argAttrs(1, 1, 0))), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(indices(run("ArgMax", {&x}, DType::I64, {2, 1}, argAttrs(1, 1, 1))), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(indices(run("ArgMin", {&x}, DType::I64, {2}, argAttrs(-1, 0, 0))), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(indices(run("ArgMin", {&x}, DType::I64, {3}, argAttrs(0, 0, 0))), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(indices(run("ArgMax", {&x}, DType::I64, {1, 3}, argAttrs(0, 1, 0))), (std::vector<int64_t>{0, 0, 0}));
}

TEST(ArgReduceKernels, RandomAgainstReference) {
  Tensor x = randomF32({4, 5, 6}, 3);
  for (int64_t axis = 0; axis < 3; ++axis) {
    Shape outShape = x.shape();
    outShape.erase(outShape.begin() + axis);
    Tensor mx = run("ArgMax", {&x}, DType::I64, outShape, argAttrs(axis, 0, 0));
    Tensor mn = run("ArgMin", {&x}, DType::I64, outShape, argAttrs(axis - 3, 0, 0));
    std::vector<int64_t> st = rowMajorStrides(x.shape());
    int64_t o = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      std::vector<int64_t> idx = {i / st[0], (i / st[1]) % 5, i % 6};
      if (idx[size_t(axis)] != 0) continue;
      int64_t best = 0, worst = 0;
      for (int64_t k = 1; k < x.shape()[size_t(axis)]; ++k) {
        float v = x.data<float>()[i + k * st[size_t(axis)]];
        if (v > x.data<float>()[i + best * st[size_t(axis)]]) best = k;
        if (v < x.data<float>()[i + worst * st[size_t(axis)]]) worst = k;
      }
      ASSERT_EQ(mx.data<int64_t>()[o], best) << "axis " << axis << " output " << o;
      ASSERT_EQ(mn.data<int64_t>()[o], worst) << "axis " << axis << " output " << o;
      ++o;
    }
  }
}

TEST(ArgReduceKernels, NaNIsTheExtremeAndIntegersWork) {
  Tensor x = f32({4}, {1, NAN, 7, NAN});
  EXPECT_EQ(indices(run("ArgMax", {&x}, DType::I64, {}, argAttrs(0, 0, 0))), (std::vector<int64_t>{1}));
  EXPECT_EQ(indices(run("ArgMin", {&x}, DType::I64, {}, argAttrs(0, 0, 1))), (std::vector<int64_t>{3}));
  Tensor n = Tensor::fromVector<int64_t>(DType::I64, {3}, {-5, 9, 9});
  EXPECT_EQ(indices(run("ArgMax", {&n}, DType::I64, {1}, argAttrs(0, 1, 1))), (std::vector<int64_t>{2}));
  EXPECT_NE(runError("ArgMax", {&n}, DType::I64, {1}, argAttrs(1, 1, 0)).find("out of range"), std::string::npos);
}

// The dim grouping both backends' reductions share (runtime/cpu/ReduceGroups.h).
TEST(ReduceGroups, DropsUnitDimsMergesNeighboursAndFindsTheBlock) {
  auto g = megac::cpu::groupReduceDims({2, 1, 3, 4, 1, 5}, {false, true, true, true, false, false});
  EXPECT_TRUE(g.blocked); // [2 | 12 | 5]
  EXPECT_EQ(g.outer, 2);
  EXPECT_EQ(g.inner, 5);
  EXPECT_EQ(g.outCount, 10);
  EXPECT_EQ(g.redCount, 12);
  ASSERT_EQ(g.groups.size(), 3u);
  EXPECT_EQ(g.groups[1].extent, 12);
  g = megac::cpu::groupReduceDims({2, 3, 4, 5}, {true, false, true, false}); // reduced, kept, reduced, kept
  EXPECT_FALSE(g.blocked);
  EXPECT_EQ(g.outCount, 15);
  EXPECT_EQ(g.redCount, 8);
  EXPECT_EQ(g.groups.size(), 4u);
  g = megac::cpu::groupReduceDims({7, 1}, {false, true}); // reducing a unit dim: nothing is summed
  EXPECT_TRUE(g.blocked);
  EXPECT_EQ(g.redCount, 1);
  EXPECT_EQ(g.outer, 7);
}
