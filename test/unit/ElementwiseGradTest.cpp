// Finite-difference checks (float64) of the elementwise gradient rules
// (passes/autodiff/ElementwiseGrads.cpp) and megac.GeluGrad, with
// broadcasting operands; hand-computed expectations at ties, where the
// rules pick a side and central differences split.
#include "GradTestUtil.h"

#include <cmath>

using namespace megac;
using namespace megac::testing;
using namespace megac::testing::grad;

namespace {

// Operand shape pairs: equal, one side broadcast, both sides broadcast, scalar.
const std::vector<std::pair<Shape, Shape>> kBinaryShapes = {
    {{2, 3}, {2, 3}}, {{2, 3, 4}, {4}}, {{3, 1, 4}, {2, 1}}, {{}, {2, 3}}, {{2, 1, 3}, {1, 4, 1}}};

class BinaryGrad : public ::testing::TestWithParam<const char *> {};

TEST_P(BinaryGrad, MatchesFiniteDifferencesWithBroadcasting) {
  std::string op = GetParam();
  uint32_t seed = 1;
  for (auto &[a, b] : kBinaryShapes) {
    // Div's divisor stays away from 0.
    double lo = op == "Div" ? 0.5 : -1, hi = op == "Div" ? 2 : 1;
    EXPECT_LT(gradCheck(op, {in(a, seed), in(b, seed + 1, lo, hi)}), kTol)
        << op << " " << shapeToString(a) << " " << shapeToString(b);
    seed += 2;
  }
}

TEST_P(BinaryGrad, OnlyOneOperandDifferentiated) {
  std::string op = GetParam();
  Tensor a = randomTensor(DType::F64, {2, 3}, 5), b = randomTensor(DType::F64, {3}, 6, 0.5, 2);
  EXPECT_LT(gradCheck(op, {in({2, 3}, 5), fixed(b)}), kTol);
  EXPECT_LT(gradCheck(op, {fixed(a), in({3}, 6, 0.5, 2)}), kTol);
  EXPECT_LT(f32VersusF64(op, {in({2, 3}, 5), in({3}, 6, 0.5, 2)}), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Arith, BinaryGrad, ::testing::Values("Add", "Sub", "Mul", "Div"));

TEST(PowGrad, BaseAndExponentBothVary) {
  // d/dbase and d/dexponent, with broadcasting; base > 0 so log(base) exists.
  EXPECT_LT(gradCheck("Pow", {in({2, 3}, 1, 0.5, 2), in({2, 3}, 2, -2, 2)}), kTol);
  EXPECT_LT(gradCheck("Pow", {in({2, 3, 4}, 3, 0.5, 2), in({4}, 4, -2, 2)}), kTol);
  EXPECT_LT(gradCheck("Pow", {in({4}, 5, 0.5, 2), in({3, 1}, 6, -2, 2)}), kTol);
  EXPECT_LT(gradCheck("Pow", {in({}, 7, 0.5, 2), in({2, 2}, 8, -2, 2)}), kTol);
}

TEST(PowGrad, ConstantExponents) {
  // Constant scalar exponents take the special cases (0, 1, 2) and the general
  // path; negative bases with integral exponents.
  for (double e : {0.0, 1.0, 2.0, 3.0, -1.0, 0.5, 2.5}) {
    double lo = std::floor(e) == e ? -2 : 0.5;
    EXPECT_LT(gradCheck("Pow", {in({2, 3}, 9, lo, 2), constant(f64s({}, {e}))}), kTol) << "exponent " << e;
  }
  // A constant non-scalar exponent, an integer exponent (no gradient for it).
  EXPECT_LT(gradCheck("Pow", {in({2, 3}, 10, 0.5, 2), constant(f64s({3}, {1.5, -2, 3}))}), kTol);
  EXPECT_LT(gradCheck("Pow", {in({2, 3}, 11, -2, 2), constant(i64scalar(3))}), kTol);
  EXPECT_LT(gradCheck("Pow", {in({2, 3}, 12, -2, 2), fixed(i64s({1, 2, 3}))}), kTol);
  EXPECT_LT(f32VersusF64("Pow", {in({2, 3}, 13, 0.5, 2), in({3}, 14, -2, 2)}), 1e-5);
}

struct UnaryCase {
  const char *op;
  double lo, hi;
};

class UnaryGrad : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryGrad, MatchesFiniteDifferences) {
  UnaryCase u = GetParam();
  EXPECT_LT(gradCheck(u.op, {in({3, 4}, 21, u.lo, u.hi)}), kTol);
  EXPECT_LT(gradCheck(u.op, {in({}, 22, u.lo, u.hi)}), kTol);
  EXPECT_LT(gradCheck(u.op, {in({2, 3, 5}, 23, u.lo * 3, u.hi * 3)}), kTol);
  EXPECT_LT(f32VersusF64(u.op, {in({3, 4}, 24, u.lo, u.hi)}), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Math, UnaryGrad,
                         ::testing::Values(UnaryCase{"Neg", -1, 1}, UnaryCase{"Abs", -1, 1},
                                           UnaryCase{"Sqrt", 0.2, 2}, UnaryCase{"Reciprocal", 0.3, 2},
                                           UnaryCase{"Exp", -1, 1}, UnaryCase{"Log", 0.2, 2},
                                           UnaryCase{"Sin", -2, 2}, UnaryCase{"Cos", -2, 2},
                                           UnaryCase{"Tanh", -1, 1}, UnaryCase{"Sigmoid", -1.5, 1.5},
                                           UnaryCase{"Relu", -1, 1}, UnaryCase{"Erf", -1, 1},
                                           UnaryCase{"Identity", -1, 1}),
                         [](const auto &info) { return std::string(info.param.op); });

TEST(GeluGrad, ExactAndTanh) {
  for (const char *approx : {"none", "tanh"}) {
    EXPECT_LT(gradCheck("Gelu", {in({4, 5}, 31, -3, 3)}, attrs({{"approximate", S(approx)}})), kTol) << approx;
    EXPECT_LT(f32VersusF64("Gelu", {in({4, 5}, 32, -3, 3)}, attrs({{"approximate", S(approx)}})), 1e-5);
  }
  EXPECT_LT(gradCheck("Gelu", {in({2, 3}, 33, -3, 3)}), kTol); // default: exact
}

TEST(GeluGrad, HandComputedAtZeroAndOne) {
  // Gelu'(0) = 0.5 for both forms; exact Gelu'(1) = Phi(1) + phi(1).
  Tensor x = f64s({2}, {0, 1});
  auto g = analyticGrads("Gelu", {of(x)}, {f64s({2}, {1, 1})});
  ASSERT_EQ(g.size(), 1u);
  double phi1 = std::exp(-0.5) / std::sqrt(2 * M_PI), cdf1 = 0.5 * (1 + std::erf(1 / std::sqrt(2.0)));
  expectTensorNear(g[0], {0.5, cdf1 + phi1});
}

TEST(WhereGrad, BranchesWithBroadcasting) {
  Tensor cond = bools({2, 3}, {1, 0, 1, 0, 0, 1});
  EXPECT_LT(gradCheck("Where", {fixed(cond), in({2, 3}, 41), in({2, 3}, 42)}), kTol);
  EXPECT_LT(gradCheck("Where", {fixed(cond), in({3}, 43), in({}, 44)}), kTol);
  EXPECT_LT(gradCheck("Where", {fixed(bools({3, 1}, {1, 0, 1})), in({1, 4}, 45), in({3, 4}, 46)}), kTol);
  EXPECT_LT(gradCheck("Where", {constant(cond), fixed(randomTensor(DType::F64, {2, 3}, 47)), in({2, 1}, 48)}), kTol);
}

TEST(ExtremumGrad, VariadicWithBroadcasting) {
  for (const char *op : {"Max", "Min"}) {
    EXPECT_LT(gradCheck(op, {in({2, 3}, 51), in({2, 3}, 52)}), kTol) << op;
    EXPECT_LT(gradCheck(op, {in({2, 3}, 53), in({3}, 54), in({2, 1}, 55)}), kTol) << op;
    EXPECT_LT(gradCheck(op, {in({4}, 56)}), kTol) << op;
    EXPECT_LT(gradCheck(op, {in({}, 57), in({2, 2}, 58), fixed(randomTensor(DType::F64, {2, 2}, 59))}), kTol);
  }
}

TEST(ExtremumGrad, TiesGoToTheFirstInput) {
  Tensor a = f64s({3}, {1, 2, 3}), b = f64s({3}, {1, 0, 3}), c = f64s({3}, {1, 2, 5});
  auto g = analyticGrads("Max", {of(a), of(b), of(c)}, {f64s({3}, {10, 20, 30})});
  ASSERT_EQ(g.size(), 3u);
  expectTensorNear(g[0], {10, 20, 0});
  expectTensorNear(g[1], {0, 0, 0});
  expectTensorNear(g[2], {0, 0, 30});
  // Broadcast: the scalar ties with every element of the first input.
  auto m = analyticGrads("Min", {of(f64s({2}, {4, 1})), of(f64s({}, {4}))}, {f64s({2}, {1, 2})});
  ASSERT_EQ(m.size(), 2u);
  expectTensorNear(m[0], {1, 2});
  expectTensorNear(m[1], {0});
}

TEST(SumMeanGrad, VariadicWithBroadcasting) {
  for (const char *op : {"Sum", "Mean"}) {
    EXPECT_LT(gradCheck(op, {in({2, 3}, 61), in({3}, 62), in({2, 1}, 63)}), kTol) << op;
    EXPECT_LT(gradCheck(op, {in({4}, 64)}), kTol) << op;
  }
}

TEST(CastGrad, CastsTheGradientBack) {
  EXPECT_LT(gradCheck("Cast", {in({2, 3}, 71)}, attrs({{"to", I(int64_t(DType::F64))}})), kTol);
  // Through f32 and back: the FD of the rounded function is exact only to
  // f32 precision, so check the gradient's dtype and value directly.
  Tensor x = randomTensor(DType::F64, {2, 3}, 72), seed = randomTensor(DType::F32, {2, 3}, 73);
  auto g = analyticGrads("Cast", {of(x)}, {seed}, attrs({{"to", I(int64_t(DType::F32))}}));
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].dtype(), DType::F64);
  std::vector<double> want;
  for (int64_t i = 0; i < seed.numel(); ++i) want.push_back(seed.getAsDouble(i));
  expectTensorNear(g[0], want);
  auto gl = analyticGrads("CastLike", {of(x), fixed(Tensor(DType::F32, {}))}, {seed});
  ASSERT_EQ(gl.size(), 1u);
  EXPECT_EQ(gl[0].dtype(), DType::F64);
  expectTensorNear(gl[0], want);
  EXPECT_LT(gradCheck("CastLike", {in({2, 3}, 74), fixed(Tensor(DType::F64, {1}))}), kTol);
}

TEST(DropoutGrad, InferenceIsIdentity) {
  EXPECT_LT(gradCheck("Dropout", {in({2, 3}, 81)}), kTol);
  EXPECT_LT(gradCheck("Dropout", {in({2, 3}, 82), constant(f64s({}, {0.3})), constant(bools({}, {0}))}, {}, 2), kTol);
  EXPECT_LT(gradCheck("Dropout", {in({2, 3}, 83), none(), constant(bools({}, {0}))}), kTol);
}

TEST(ClipGrad, BoundsPresentOrNot) {
  Tensor lo = f64s({}, {-0.4}), hi = f64s({}, {0.5});
  EXPECT_LT(gradCheck("Clip", {in({4, 5}, 91), constant(lo), constant(hi)}), kTol);
  EXPECT_LT(gradCheck("Clip", {in({4, 5}, 92), constant(lo)}), kTol);
  EXPECT_LT(gradCheck("Clip", {in({4, 5}, 93), none(), constant(hi)}), kTol);
  EXPECT_LT(gradCheck("Clip", {in({4, 5}, 94)}), kTol);
  // Differentiable bounds, and lo > hi (every element becomes hi).
  EXPECT_LT(gradCheck("Clip", {in({4, 5}, 95), of(lo), of(hi)}), kTol);
  EXPECT_LT(gradCheck("Clip", {in({4, 5}, 96), of(f64s({}, {0.3})), of(f64s({}, {-0.2}))}), kTol);
  EXPECT_LT(gradCheck("Clip", {in({4, 5}, 97), none(), of(hi)}), kTol);
}

TEST(ClipGrad, HandComputed) {
  // x = [-1, 0, 0.5, 2], Clip to [0, 1]: x passes where 0 <= x <= 1 (the
  // bound itself counts as inside).
  auto g = analyticGrads("Clip", {of(f64s({4}, {-1, 0, 0.5, 2})), of(f64s({}, {0})), of(f64s({}, {1}))},
                         {f64s({4}, {1, 2, 3, 4})});
  ASSERT_EQ(g.size(), 3u);
  expectTensorNear(g[0], {0, 2, 3, 0});
  expectTensorNear(g[1], {1});
  expectTensorNear(g[2], {4});
}

TEST(ReluGrad, HandComputed) {
  auto g = analyticGrads("Relu", {of(f64s({4}, {-1, 0, 0.5, 2}))}, {f64s({4}, {1, 2, 3, 4})});
  ASSERT_EQ(g.size(), 1u);
  expectTensorNear(g[0], {0, 0, 3, 4});
}

TEST(SelectionGradF32, SameAsF64) {
  EXPECT_LT(f32VersusF64("Where", {fixed(bools({2, 3}, {1, 0, 1, 0, 0, 1})), in({3}, 101), in({2, 1}, 102)}), 1e-6);
  EXPECT_LT(f32VersusF64("Max", {in({2, 3}, 103), in({3}, 104), in({2, 1}, 105)}), 1e-6);
  EXPECT_LT(f32VersusF64("Clip", {in({4, 5}, 106), of(f64s({}, {-0.25})), of(f64s({}, {0.5}))}), 1e-6);
  EXPECT_LT(f32VersusF64("Pow", {in({2, 3}, 107, -2, 2), constant(f64s({}, {3}))}), 1e-5);
}

// x feeds n Muls: each backward step accumulates into x's gradient (an Add
// appended while the op's other input is still to be handled), and every
// weight must still get its own gradient, whenever the graph's op list grows.
void checkManyUses(int n) {
  using namespace ir;
  Graph g;
  g.opset = 23;
  auto input = [&](const std::string &name) {
    Value v;
    v.name = name;
    v.type = {DType::F64, {2}, false};
    v.kind = ValueKind::Input;
    ValueId id = g.addValueUnique(std::move(v));
    g.inputs.push_back(id);
    return id;
  };
  ValueId x = input("x");
  std::vector<ValueId> ws, products;
  autodiff::GradBuilder b(g, "fwd");
  for (int i = 0; i < n; ++i) {
    ws.push_back(input("w" + std::to_string(i)));
    products.push_back(b.op("Mul", {x, ws.back()}));
  }
  ValueId y = b.op("Sum", products);
  ASSERT_FALSE(b.failed());
  ValueId seed = g.addConst("seed", f64s({2}, {3, 5}));
  std::vector<ValueId> wrt = ws;
  wrt.push_back(x);
  auto r = autodiff::differentiate(g, {y}, {seed}, wrt);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  for (ValueId gv : r->grads) ASSERT_NE(gv, kNoValue) << n << " uses";
  g.outputs = r->grads;
  std::map<std::string, Tensor> feeds{{"x", f64s({2}, {2, -1})}};
  for (int i = 0; i < n; ++i) feeds["w" + std::to_string(i)] = f64s({2}, {double(i), 1});
  auto out = runGraph(g, feeds);
  ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
  for (int i = 0; i < n; ++i) expectTensorNear((*out)[size_t(i)], {6, -5}); // seed * x
  expectTensorNear((*out)[size_t(n)], {3.0 * (n - 1) * n / 2, 5.0 * n});     // seed * sum(w)
}

TEST(GradAccumulation, ManyUsesOfOneValue) {
  for (int n = 1; n <= 70; ++n) checkManyUses(n);
}

} // namespace
