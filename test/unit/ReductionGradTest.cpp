// Finite-difference checks (float64) of the reduction and CumSum gradient
// rules (passes/autodiff/ReductionGrads.cpp): axes (none, listed, negative),
// keepdims and noop_with_empty_axes; ties of ReduceMax/Min by hand.
#include "GradTestUtil.h"

using namespace megac;
using namespace megac::testing;
using namespace megac::testing::grad;

namespace {

struct ReduceForm {
  std::vector<int64_t> axes;
  bool hasAxes;
  int64_t keepdims;
  int64_t noop;
};

const std::vector<ReduceForm> kForms = {
    {{}, false, 1, 0},      // every axis, kept
    {{}, false, 0, 0},      // every axis, to a scalar
    {{1}, true, 1, 0},      {{1}, true, 0, 0},     {{0, -1}, true, 0, 0}, {{-1, 0}, true, 1, 0},
    {{}, true, 0, 1},       // empty axes + noop: the identity
    {{}, true, 0, 0},       // empty axes: every axis
};

double checkForm(const std::string &op, const ReduceForm &f, uint32_t seed, double lo, double hi) {
  std::vector<GradCheckInput> ins{in({3, 4, 2}, seed, lo, hi)};
  if (f.hasAxes) ins.push_back(constant(i64s(f.axes)));
  return gradCheck(op, ins, attrs({{"keepdims", I(f.keepdims)}, {"noop_with_empty_axes", I(f.noop)}}));
}

struct ReduceCase {
  const char *op;
  double lo, hi;
};

class ReduceGrad : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(ReduceGrad, EveryAxesForm) {
  ReduceCase c = GetParam();
  uint32_t seed = 1;
  for (const ReduceForm &f : kForms) {
    EXPECT_LT(checkForm(c.op, f, seed++, c.lo, c.hi), kTol)
        << c.op << " axes " << f.axes.size() << " keepdims " << f.keepdims << " noop " << f.noop;
  }
  EXPECT_LT(f32VersusF64(c.op, {in({3, 4}, 40, c.lo, c.hi), constant(i64s({1}))}), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Reduce, ReduceGrad,
                         ::testing::Values(ReduceCase{"ReduceSum", -1, 1}, ReduceCase{"ReduceMean", -1, 1},
                                           ReduceCase{"ReduceSumSquare", -1, 1}, ReduceCase{"ReduceMax", -1, 1},
                                           ReduceCase{"ReduceMin", -1, 1}, ReduceCase{"ReduceL1", -1, 1},
                                           ReduceCase{"ReduceL2", -1, 1}, ReduceCase{"ReduceLogSumExp", -1, 1},
                                           ReduceCase{"ReduceLogSum", 0.2, 2}),
                         [](const auto &info) { return std::string(info.param.op); });

TEST(ReduceExtremumGrad, TiesShareEvenly) {
  // Row 0 has its max 3 three times; row 1 has one max.
  Tensor x = f64s({2, 4}, {3, 1, 3, 3, 0, 2, 1, -1});
  auto g = analyticGrads("ReduceMax", {of(x), constant(i64s({1}))}, {f64s({2}, {6, 5})},
                         attrs({{"keepdims", I(0)}}));
  ASSERT_EQ(g.size(), 1u);
  expectTensorNear(g[0], {2, 0, 2, 2, 0, 5, 0, 0});
  auto m = analyticGrads("ReduceMin", {of(x)}, {f64s({1, 1}, {4})});
  ASSERT_EQ(m.size(), 1u);
  expectTensorNear(m[0], {0, 0, 0, 0, 0, 0, 0, 4});
}

TEST(ReduceMeanGrad, HandComputed) {
  auto g = analyticGrads("ReduceMean", {of(f64s({2, 2}, {1, 2, 3, 4})), constant(i64s({0}))}, {f64s({1, 2}, {4, 8})});
  ASSERT_EQ(g.size(), 1u);
  expectTensorNear(g[0], {2, 4, 2, 4});
}

TEST(CumSumGrad, ExclusiveAndReverse) {
  for (int64_t exclusive : {0, 1})
    for (int64_t reverse : {0, 1}) {
      Attrs a = attrs({{"exclusive", I(exclusive)}, {"reverse", I(reverse)}});
      EXPECT_LT(gradCheck("CumSum", {in({3, 5}, 51), constant(i64scalar(1))}, a), kTol)
          << "exclusive " << exclusive << " reverse " << reverse;
      EXPECT_LT(gradCheck("CumSum", {in({3, 5}, 52), fixed(i64scalar(-2))}, a), kTol);
      EXPECT_LT(gradCheck("CumSum", {in({6}, 53), constant(i64scalar(0))}, a), kTol);
    }
  EXPECT_LT(f32VersusF64("CumSum", {in({3, 5}, 54), constant(i64scalar(1))}, attrs({{"reverse", I(1)}})), 1e-5);
  // y = cumsum([a, b, c]): dy = [1, 2, 4] gives dx = [7, 6, 4].
  auto g = analyticGrads("CumSum", {of(f64s({3}, {0, 0, 0})), constant(i64scalar(0))}, {f64s({3}, {1, 2, 4})});
  ASSERT_EQ(g.size(), 1u);
  expectTensorNear(g[0], {7, 6, 4});
}

} // namespace
