// CPU kernels of the elementwise family: hand-computed values for the ONNX
// corner cases (integer division, Mod signs, Round half to even, Cast
// truncation...) and random inputs checked against naive loops that index
// broadcast operands directly.
#include "runtime/cpu/Broadcast.h"
#include "runtime/cpu/ElementwiseKernels.h"
#include "runtime/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

using namespace megac;
using namespace megac::cpu;

namespace {

template <class T> Tensor make(DType dt, Shape s, std::vector<T> v) { return Tensor::fromVector<T>(dt, std::move(s), v); }
Tensor f32(Shape s, std::vector<float> v) { return make<float>(DType::F32, std::move(s), std::move(v)); }
Tensor i32(Shape s, std::vector<int32_t> v) { return make<int32_t>(DType::I32, std::move(s), std::move(v)); }
Tensor i64(Shape s, std::vector<int64_t> v) { return make<int64_t>(DType::I64, std::move(s), std::move(v)); }
Tensor boolean(Shape s, std::vector<uint8_t> v) { return make<uint8_t>(DType::Bool, std::move(s), std::move(v)); }

Tensor randomTensor(DType dt, Shape s, unsigned seed, double lo = -3, double hi = 3) {
  Tensor t(dt, std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.setFromDouble(i, d(rng));
  return t;
}

struct KernelRun {
  std::vector<Tensor> outputs;
  std::string error; // "" when the kernel succeeded
  const Tensor &operator[](size_t i) const { return outputs[i]; }
};

// Runs op into outputs allocated as (dtype, shape); DType::Undefined leaves an
// optional output out.
KernelRun run(const std::string &op, std::vector<const Tensor *> ins, std::vector<std::pair<DType, Shape>> outs,
        const Attrs &attrs = {}) {
  KernelRun r;
  for (auto &[dt, shape] : outs) r.outputs.push_back(dt == DType::Undefined ? Tensor() : Tensor(dt, shape));
  KernelContext ctx{attrs, std::move(ins), {}};
  for (Tensor &t : r.outputs) ctx.outputs.push_back(&t);
  if (llvm::Error e = runKernel(op, ctx)) r.error = llvm::toString(std::move(e));
  return r;
}

Tensor runOk(const std::string &op, std::vector<const Tensor *> ins, DType dt, Shape shape, const Attrs &attrs = {}) {
  KernelRun r = run(op, std::move(ins), {{dt, std::move(shape)}}, attrs);
  EXPECT_EQ(r.error, "") << op;
  return r.outputs[0];
}

void expectValues(const Tensor &got, const std::vector<double> &want, double tol = 0) {
  ASSERT_EQ(got.numel(), int64_t(want.size()));
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.getAsDouble(i), w = want[size_t(i)];
    if (std::isnan(w)) EXPECT_TRUE(std::isnan(g)) << "element " << i;
    else if (tol == 0) EXPECT_EQ(g, w) << "element " << i;
    else EXPECT_NEAR(g, w, tol * (1 + std::fabs(w))) << "element " << i;
  }
}

Attrs attrs(std::initializer_list<std::pair<const char *, Attr>> list) {
  Attrs a;
  for (auto &[k, v] : list) a.set(k, v);
  return a;
}

// Element `flat` of `out`-shaped iteration, read from t broadcast to out.
double broadcastAt(const Tensor &t, const Shape &out, int64_t flat) {
  std::vector<int64_t> idx(out.size());
  for (size_t d = out.size(); d-- > 0;) {
    idx[d] = flat % out[d];
    flat /= out[d];
  }
  int64_t off = 0, stride = 1;
  for (size_t k = t.shape().size(); k-- > 0;) {
    size_t d = out.size() - t.shape().size() + k;
    int64_t i = t.shape()[k] == 1 ? 0 : idx[d];
    off += i * stride;
    stride *= t.shape()[k];
  }
  return t.getAsDouble(off);
}

// ---- Broadcast machinery ----

TEST(Broadcast, PlanMergesDimsThatBroadcastAlike) {
  BroadcastPlan same({2, 3, 4}, {Shape{2, 3, 4}, Shape{2, 3, 4}});
  EXPECT_EQ(same.numRows(), 1);
  EXPECT_EQ(same.rowLength(), 24);
  EXPECT_EQ(same.innerStride(1), 1);

  BroadcastPlan scalar({2, 3, 4}, {Shape{2, 3, 4}, Shape{}});
  EXPECT_EQ(scalar.numRows(), 1);
  EXPECT_EQ(scalar.innerStride(0), 1);
  EXPECT_EQ(scalar.innerStride(1), 0);

  BroadcastPlan bias({2, 3, 4}, {Shape{2, 3, 4}, Shape{4}});
  EXPECT_EQ(bias.numRows(), 6);
  EXPECT_EQ(bias.rowLength(), 4);

  BroadcastPlan column({5, 7}, {Shape{5, 1}, Shape{1, 7}});
  EXPECT_EQ(column.numRows(), 5);
  EXPECT_EQ(column.innerStride(0), 0);
  EXPECT_EQ(column.innerStride(1), 1);
}

TEST(Broadcast, ShapeRules) {
  EXPECT_TRUE(broadcastsTo({3, 1}, {2, 3, 4}));
  EXPECT_TRUE(broadcastsTo({}, {2}));
  EXPECT_FALSE(broadcastsTo({3}, {2, 4}));
  EXPECT_FALSE(broadcastsTo({1, 2, 3}, {2, 3}));
  EXPECT_EQ(broadcastAll({{2, 1, 3}, {4, 1}, {}}), (Shape{2, 4, 3}));
  EXPECT_EQ(broadcastAll({{0, 1}, {1, 5}}), (Shape{0, 5}));
  EXPECT_FALSE(broadcastAll({{2, 3}, {3, 2}}).has_value());
}

TEST(Broadcast, RandomShapesMatchNaiveIndexing) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 200; ++iter) {
    size_t rank = rng() % 5;
    Shape out(rank), a, b;
    for (size_t d = 0; d < rank; ++d) out[d] = 1 + int64_t(rng() % 4);
    // Each operand drops some leading dims and sets some dims to 1.
    size_t ra = rank ? rng() % (rank + 1) : 0, rb = rank ? rng() % (rank + 1) : 0;
    for (size_t d = rank - ra; d < rank; ++d) a.push_back(rng() % 3 == 0 ? 1 : out[d]);
    for (size_t d = rank - rb; d < rank; ++d) b.push_back(rng() % 3 == 0 ? 1 : out[d]);
    Shape full = *broadcastAll({a, b});
    Tensor x = randomTensor(DType::F32, a, unsigned(iter)), y = randomTensor(DType::F32, b, unsigned(iter + 1000));
    Tensor sub = runOk("Sub", {&x, &y}, DType::F32, full);
    Tensor cond = randomTensor(DType::Bool, full.empty() ? Shape{} : Shape{full.back()}, unsigned(iter), 0, 2);
    Tensor sel = runOk("Where", {&cond, &x, &y}, DType::F32, full);
    for (int64_t i = 0; i < numElements(full); ++i) {
      double xv = broadcastAt(x, full, i), yv = broadcastAt(y, full, i);
      ASSERT_EQ(sub.getAsDouble(i), double(float(xv - yv))) << shapeToString(a) << " - " << shapeToString(b);
      ASSERT_EQ(sel.getAsDouble(i), broadcastAt(cond, full, i) != 0 ? xv : yv);
    }
  }
}

TEST(Broadcast, LargeTensorsUseThreadsAndStayCorrect) {
  Tensor x = randomTensor(DType::F32, {64, 1024}, 1), row = randomTensor(DType::F32, {1024}, 2);
  Tensor col = randomTensor(DType::F32, {64, 1}, 3);
  Tensor s = runOk("Mul", {&x, &x}, DType::F32, {64, 1024});
  Tensor r = runOk("Add", {&x, &row}, DType::F32, {64, 1024});
  Tensor c = runOk("Div", {&x, &col}, DType::F32, {64, 1024});
  for (int64_t i = 0; i < x.numel(); ++i) {
    float xv = x.data<float>()[i];
    ASSERT_EQ(s.data<float>()[i], xv * xv);
    ASSERT_EQ(r.data<float>()[i], xv + row.data<float>()[i % 1024]);
    ASSERT_EQ(c.data<float>()[i], xv / col.data<float>()[i / 1024]);
  }
}

TEST(Broadcast, IncompatibleShapesAreAnErrorNotACrash) {
  Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6}), b = f32({2}, {1, 2});
  KernelRun r = run("Add", {&a, &b}, {{DType::F32, {2, 3}}});
  EXPECT_NE(r.error.find("does not broadcast"), std::string::npos) << r.error;
}

// ---- Arithmetic ----

TEST(ElementwiseArith, IntegerDivisionTruncatesTowardZero) {
  Tensor a = i32({6}, {7, -7, 7, -7, 5, std::numeric_limits<int32_t>::min()});
  Tensor b = i32({6}, {2, 2, -2, -2, 0, -1});
  expectValues(runOk("Div", {&a, &b}, DType::I32, {6}), {3, -3, -3, 3, 0, double(std::numeric_limits<int32_t>::min())});
  Tensor u = make<uint8_t>(DType::U8, {3}, {200, 7, 9}), v = make<uint8_t>(DType::U8, {3}, {3, 7, 10});
  expectValues(runOk("Div", {&u, &v}, DType::U8, {3}), {66, 1, 0});
}

TEST(ElementwiseArith, ModFollowsDivisorSignUnlessFmod) {
  Tensor a = i64({6}, {-4, 7, 5, 4, -7, 8}), b = i64({6}, {2, -3, 8, -2, 3, 5});
  expectValues(runOk("Mod", {&a, &b}, DType::I64, {6}), {0, -2, 5, 0, 2, 3});
  expectValues(runOk("Mod", {&a, &b}, DType::I64, {6}, attrs({{"fmod", Attr::ofInt(1)}})), {0, 1, 5, 0, -1, 3});
  Tensor x = f32({6}, {-4.3f, 7.2f, 5.0f, 4.3f, -7.2f, 8.0f}), y = f32({6}, {2.1f, -3.4f, 8.0f, -2.1f, 3.4f, 5.0f});
  expectValues(runOk("Mod", {&x, &y}, DType::F32, {6}, attrs({{"fmod", Attr::ofInt(1)}})),
               {-0.1, 0.4, 5.0, 0.1, -0.4, 3.0}, 1e-5);
  expectValues(runOk("Mod", {&x, &y}, DType::F32, {6}), {2.0, -3.0, 5.0, -2.0, 3.0, 3.0}, 1e-5);
  Tensor zero = i64({1}, {0});
  expectValues(runOk("Mod", {&a, &zero}, DType::I64, {6}), {0, 0, 0, 0, 0, 0});
}

TEST(ElementwiseArith, PowMixedTypesKeepTheBaseType) {
  Tensor fb = f32({3}, {1, 2, 3});
  Tensor ie = i64({3}, {4, 5, 6});
  expectValues(runOk("Pow", {&fb, &ie}, DType::F32, {3}), {1, 32, 729});
  Tensor ib = i32({3}, {1, 2, 3}), fe = f32({3}, {4, 5, 0.5f});
  expectValues(runOk("Pow", {&ib, &fe}, DType::I32, {3}), {1, 32, 1}); // 3^0.5 = 1.73 truncates to 1
  Tensor base = i64({4}, {3, -2, 2, -1}), ex = i64({4}, {4, 3, -1, -3});
  expectValues(runOk("Pow", {&base, &ex}, DType::I64, {4}), {81, -8, 0, -1});
  Tensor x = randomTensor(DType::F32, {5, 4}, 3), two = f32({}, {2});
  Tensor sq = runOk("Pow", {&x, &two}, DType::F32, {5, 4});
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(sq.data<float>()[i], x.data<float>()[i] * x.data<float>()[i]);
  Tensor half = f32({2}, {0.5f, -1.0f}), four = f32({2, 1}, {4, 9});
  expectValues(runOk("Pow", {&four, &half}, DType::F32, {2, 2}), {2, 0.25, 3, 1.0 / 9}, 1e-6);
}

TEST(ElementwiseArith, VariadicOpsBroadcastAllInputs) {
  Tensor a = f32({3}, {1, 5, 3}), b = f32({2, 1}, {2, 4}), c = f32({}, {0.5f});
  expectValues(runOk("Max", {&a, &b, &c}, DType::F32, {2, 3}), {2, 5, 3, 4, 5, 4});
  expectValues(runOk("Min", {&a, &b, &c}, DType::F32, {2, 3}), {0.5, 0.5, 0.5, 0.5, 0.5, 0.5});
  expectValues(runOk("Sum", {&a, &b, &c}, DType::F32, {2, 3}), {3.5, 7.5, 5.5, 5.5, 9.5, 7.5});
  expectValues(runOk("Mean", {&a, &b}, DType::F32, {2, 3}), {1.5, 3.5, 2.5, 2.5, 4.5, 3.5});
  expectValues(runOk("Sum", {&a}, DType::F32, {3}), {1, 5, 3});
  Tensor n = f32({2}, {NAN, 1}), m = f32({2}, {1, NAN});
  expectValues(runOk("Max", {&n, &m}, DType::F32, {2}), {NAN, NAN});
  Tensor i = make<int8_t>(DType::I8, {3}, {-128, 5, 127}), j = make<int8_t>(DType::I8, {3}, {0, -5, 126});
  expectValues(runOk("Max", {&i, &j}, DType::I8, {3}), {0, 5, 127});
  Tensor ua = make<uint64_t>(DType::U64, {2}, {1, ~0ull}), ub = make<uint64_t>(DType::U64, {2}, {2, 0});
  Tensor mn = runOk("Min", {&ua, &ub}, DType::U64, {2});
  EXPECT_EQ(mn.data<uint64_t>()[0], 1u);
  EXPECT_EQ(mn.data<uint64_t>()[1], 0u);
}

TEST(ElementwiseArith, HalfTypesComputeThroughFloat) {
  Tensor a(DType::F16, {3}), b(DType::F16, {3});
  for (int i = 0; i < 3; ++i) {
    a.setFromDouble(i, 1.5 * (i + 1));
    b.setFromDouble(i, 0.25);
  }
  Tensor s = runOk("Add", {&a, &b}, DType::F16, {3});
  expectValues(s, {1.75, 3.25, 4.75});
  Tensor lt = runOk("Less", {&a, &b}, DType::Bool, {3});
  expectValues(lt, {0, 0, 0});
  Tensor h(DType::BF16, {2});
  h.setFromDouble(0, -2);
  h.setFromDouble(1, 3);
  expectValues(runOk("Relu", {&h}, DType::BF16, {2}), {0, 3});
}

TEST(ElementwiseArith, MismatchedTypesAreRejected) {
  Tensor a = f32({2}, {1, 2});
  Tensor b = i64({2}, {1, 2});
  EXPECT_NE(run("Add", {&a, &b}, {{DType::F32, {2}}}).error, "");
  EXPECT_NE(run("Sqrt", {&b}, {{DType::I64, {2}}}).error.find("not supported"), std::string::npos);
  EXPECT_NE(run("Add", {&a, nullptr}, {{DType::F32, {2}}}).error.find("missing"), std::string::npos);
}

// ---- Comparison and logic ----

TEST(ElementwiseLogic, ComparisonsGiveBool) {
  Tensor a = i64({2, 2}, {1, 2, 3, 4}), b = i64({2}, {2, 2});
  expectValues(runOk("Equal", {&a, &b}, DType::Bool, {2, 2}), {0, 1, 0, 0});
  expectValues(runOk("Less", {&a, &b}, DType::Bool, {2, 2}), {1, 0, 0, 0});
  expectValues(runOk("LessOrEqual", {&a, &b}, DType::Bool, {2, 2}), {1, 1, 0, 0});
  expectValues(runOk("Greater", {&a, &b}, DType::Bool, {2, 2}), {0, 0, 1, 1});
  expectValues(runOk("GreaterOrEqual", {&a, &b}, DType::Bool, {2, 2}), {0, 1, 1, 1});
  Tensor n = f32({2}, {NAN, 1}), one = f32({}, {1});
  expectValues(runOk("Equal", {&n, &one}, DType::Bool, {2}), {0, 1});
  Tensor p = boolean({2}, {1, 0}), q = boolean({2}, {1, 1});
  expectValues(runOk("Equal", {&p, &q}, DType::Bool, {2}), {1, 0});
}

TEST(ElementwiseLogic, AndOrXorNot) {
  Tensor a = boolean({4}, {0, 0, 1, 1}), b = boolean({4}, {0, 1, 0, 1});
  expectValues(runOk("And", {&a, &b}, DType::Bool, {4}), {0, 0, 0, 1});
  expectValues(runOk("Or", {&a, &b}, DType::Bool, {4}), {0, 1, 1, 1});
  expectValues(runOk("Xor", {&a, &b}, DType::Bool, {4}), {0, 1, 1, 0});
  expectValues(runOk("Not", {&a}, DType::Bool, {4}), {1, 1, 0, 0});
  Tensor col = boolean({2, 1}, {1, 0}), row = boolean({3}, {1, 0, 1});
  expectValues(runOk("And", {&col, &row}, DType::Bool, {2, 3}), {1, 0, 1, 0, 0, 0});
}

TEST(ElementwiseLogic, BitShift) {
  Tensor x = make<uint8_t>(DType::U8, {4}, {16, 4, 1, 255}), s = make<uint8_t>(DType::U8, {4}, {1, 2, 3, 8});
  expectValues(runOk("BitShift", {&x, &s}, DType::U8, {4}, attrs({{"direction", Attr::ofString("LEFT")}})),
               {32, 16, 8, 0});
  expectValues(runOk("BitShift", {&x, &s}, DType::U8, {4}, attrs({{"direction", Attr::ofString("RIGHT")}})),
               {8, 1, 0, 0});
}

// ---- Unary ----

TEST(ElementwiseUnary, RoundHalfToEvenAndSign) {
  Tensor x = f32({9}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, 2.6f, -2.6f, NAN});
  expectValues(runOk("Round", {&x}, DType::F32, {9}), {0, 2, 2, -0.0, -2, 2, 3, -3, NAN});
  expectValues(runOk("Sign", {&x}, DType::F32, {9}), {1, 1, 1, -1, -1, 1, 1, -1, NAN});
  Tensor i = i32({3}, {-7, 0, 9});
  expectValues(runOk("Sign", {&i}, DType::I32, {3}), {-1, 0, 1});
  expectValues(runOk("Abs", {&i}, DType::I32, {3}), {7, 0, 9});
  expectValues(runOk("Neg", {&i}, DType::I32, {3}), {7, 0, -9});
  expectValues(runOk("Relu", {&i}, DType::I32, {3}), {0, 0, 9});
}

TEST(ElementwiseUnary, ActivationsAtKnownPoints) {
  Tensor x = f32({4}, {-2, -0.5f, 0, 1});
  expectValues(runOk("Sigmoid", {&x}, DType::F32, {4}), {0.11920292, 0.37754067, 0.5, 0.73105858}, 1e-6);
  expectValues(runOk("HardSigmoid", {&x}, DType::F32, {4}), {0.1, 0.4, 0.5, 0.7}, 1e-6);
  expectValues(runOk("HardSwish", {&x}, DType::F32, {4}), {-0.33333333, -0.20833333, 0, 0.66666667}, 1e-6);
  expectValues(runOk("Elu", {&x}, DType::F32, {4}, attrs({{"alpha", Attr::ofFloat(2)}})),
               {-1.72932943, -0.78693868, 0, 1}, 1e-6);
  expectValues(runOk("Selu", {&x}, DType::F32, {4}), {-1.52016647, -0.69175819, 0, 1.05070102}, 1e-6);
  expectValues(runOk("LeakyRelu", {&x}, DType::F32, {4}), {-0.02, -0.005, 0, 1}, 1e-6);
  expectValues(runOk("Softplus", {&x}, DType::F32, {4}), {0.12692801, 0.47407698, 0.69314718, 1.31326169}, 1e-6);
  expectValues(runOk("Softsign", {&x}, DType::F32, {4}), {-0.66666667, -0.33333333, 0, 0.5}, 1e-6);
  expectValues(runOk("Gelu", {&x}, DType::F32, {4}), {-0.04550026, -0.15426877, 0, 0.84134475}, 1e-6);
  expectValues(runOk("Gelu", {&x}, DType::F32, {4}, attrs({{"approximate", Attr::ofString("tanh")}})),
               {-0.04540231, -0.15428599, 0, 0.84119199}, 1e-6);
  expectValues(runOk("Mish", {&x}, DType::F32, {4}), {-0.25250148, -0.22074377, 0, 0.86509839}, 1e-6);
  expectValues(runOk("Celu", {&x}, DType::F32, {4}, attrs({{"alpha", Attr::ofFloat(2)}})),
               {-1.26424112, -0.44239843, 0, 1}, 1e-6);
  expectValues(runOk("ThresholdedRelu", {&x}, DType::F32, {4}, attrs({{"alpha", Attr::ofFloat(0.5)}})), {0, 0, 0, 1});
  expectValues(runOk("Shrink", {&x}, DType::F32, {4}, attrs({{"bias", Attr::ofFloat(0.25)}})), {-1.75, 0, 0, 0.75});
  expectValues(runOk("Erf", {&x}, DType::F32, {4}), {-0.99532227, -0.52049988, 0, 0.84270079}, 1e-6);
}

TEST(ElementwiseUnary, StableAtExtremes) {
  Tensor x = f32({2}, {-100, 100});
  expectValues(runOk("Sigmoid", {&x}, DType::F32, {2}), {3.7200760e-44, 1}, 1e-6);
  expectValues(runOk("Softplus", {&x}, DType::F32, {2}), {0, 100}, 1e-6);
  expectValues(runOk("Mish", {&x}, DType::F32, {2}), {0, 100}, 1e-6);
}

TEST(ElementwiseUnary, MathMatchesLibmInDouble) {
  Tensor x = randomTensor(DType::F64, {50}, 11, 0.1, 0.9);
  struct Case {
    const char *op;
    double (*ref)(double);
  } cases[] = {{"Sqrt", std::sqrt}, {"Exp", std::exp},   {"Log", std::log},   {"Cos", std::cos},
               {"Sin", std::sin},   {"Tan", std::tan},   {"Tanh", std::tanh}, {"Acos", std::acos},
               {"Asin", std::asin}, {"Atan", std::atan}, {"Asinh", std::asinh}, {"Atanh", std::atanh},
               {"Cosh", std::cosh}, {"Sinh", std::sinh}, {"Floor", std::floor}, {"Ceil", std::ceil}};
  for (const Case &c : cases) {
    Tensor y = runOk(c.op, {&x}, DType::F64, {50});
    for (int64_t i = 0; i < 50; ++i) EXPECT_DOUBLE_EQ(y.data<double>()[i], c.ref(x.data<double>()[i])) << c.op;
  }
  Tensor r = runOk("Reciprocal", {&x}, DType::F64, {50});
  for (int64_t i = 0; i < 50; ++i) EXPECT_DOUBLE_EQ(r.data<double>()[i], 1 / x.data<double>()[i]);
}

TEST(ElementwiseUnary, IsNaNAndIsInf) {
  Tensor x = f32({5}, {1, NAN, INFINITY, -INFINITY, 0});
  expectValues(runOk("IsNaN", {&x}, DType::Bool, {5}), {0, 1, 0, 0, 0});
  expectValues(runOk("IsInf", {&x}, DType::Bool, {5}), {0, 0, 1, 1, 0});
  expectValues(runOk("IsInf", {&x}, DType::Bool, {5}, attrs({{"detect_negative", Attr::ofInt(0)}})), {0, 0, 1, 0, 0});
  expectValues(runOk("IsInf", {&x}, DType::Bool, {5}, attrs({{"detect_positive", Attr::ofInt(0)}})), {0, 0, 0, 1, 0});
}

// ---- Cast, Where, Clip, Identity, Dropout ----

TEST(ElementwiseCast, FloatToIntTruncatesAndToBoolIsNonzero) {
  Tensor x = f32({6}, {1.9f, -1.9f, 2.5f, -0.2f, NAN, 300.7f});
  expectValues(runOk("Cast", {&x}, DType::I32, {6}), {1, -1, 2, 0, 0, 300});
  expectValues(runOk("Cast", {&x}, DType::Bool, {6}), {1, 1, 1, 1, 1, 1});
  Tensor z = f32({2}, {0, -0.0f});
  expectValues(runOk("Cast", {&z}, DType::Bool, {2}), {0, 0});
  Tensor b = boolean({2}, {1, 0});
  expectValues(runOk("Cast", {&b}, DType::F64, {2}), {1, 0});
  Tensor big = i64({2}, {300, -1});
  expectValues(runOk("Cast", {&big}, DType::U8, {2}), {44, 255});
  Tensor i = i64({2}, {(int64_t(1) << 53) + 1, -5});
  Tensor back = runOk("Cast", {&i}, DType::I64, {2});
  EXPECT_EQ(back.data<int64_t>()[0], (int64_t(1) << 53) + 1);
}

TEST(ElementwiseCast, HalfTypesRoundToNearestEven) {
  Tensor x = f32({3}, {1.0f, 0.1f, 65504.0f});
  Tensor h = runOk("Cast", {&x}, DType::F16, {3});
  EXPECT_EQ(h.data<uint16_t>()[0], 0x3c00);
  EXPECT_EQ(h.data<uint16_t>()[1], 0x2e66); // 0.1 -> 0.0999755859375
  EXPECT_EQ(h.data<uint16_t>()[2], 0x7bff);
  Tensor bf = runOk("Cast", {&x}, DType::BF16, {3});
  EXPECT_EQ(bf.data<uint16_t>()[0], 0x3f80);
  EXPECT_EQ(bf.data<uint16_t>()[1], 0x3dcd); // 0.1 rounds up to 0.10009765625
  Tensor back = runOk("Cast", {&h}, DType::F64, {3});
  expectValues(back, {1.0, 0.0999755859375, 65504.0});
  Tensor like(DType::F32, {1});
  expectValues(runOk("CastLike", {&h, &like}, DType::F32, {3}), {1.0, 0.0999755859375, 65504.0});
}

TEST(ElementwiseCast, CastTensorApi) {
  auto r = castTensor(f32({2}, {-3.7f, 8.2f}), DType::I64);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  expectValues(*r, {-3, 8});
  auto s = castTensor(f32({1}, {1}), DType::String);
  ASSERT_FALSE(bool(s));
  EXPECT_NE(llvm::toString(s.takeError()).find("cannot cast"), std::string::npos);
}

TEST(ElementwiseMisc, WhereBroadcastsThreeWays) {
  Tensor c = boolean({3, 1}, {1, 0, 1});
  Tensor x = i64({1, 4}, {1, 2, 3, 4});
  Tensor y = i64({}, {-1});
  expectValues(runOk("Where", {&c, &x, &y}, DType::I64, {3, 4}), {1, 2, 3, 4, -1, -1, -1, -1, 1, 2, 3, 4});
  Tensor notBool = i64({3, 1}, {1, 0, 1});
  EXPECT_NE(run("Where", {&notBool, &x, &y}, {{DType::I64, {3, 4}}}).error, "");
}

TEST(ElementwiseMisc, ClipWithOptionalBounds) {
  Tensor x = f32({5}, {-3, -1, 0.5f, 2, NAN});
  Tensor lo = f32({}, {-1.5f}), hi = f32({}, {1});
  expectValues(runOk("Clip", {&x, &lo, &hi}, DType::F32, {5}), {-1.5, -1, 0.5, 1, NAN});
  expectValues(runOk("Clip", {&x, &lo}, DType::F32, {5}), {-1.5, -1, 0.5, 2, NAN});
  expectValues(runOk("Clip", {&x, nullptr, &hi}, DType::F32, {5}), {-3, -1, 0.5, 1, NAN});
  expectValues(runOk("Clip", {&x}, DType::F32, {5}), {-3, -1, 0.5, 2, NAN});
  Tensor big = f32({}, {2}), small = f32({}, {0}); // min > max: everything becomes max
  expectValues(runOk("Clip", {&x, &big, &small}, DType::F32, {5}), {0, 0, 0, 0, NAN});
  Tensor i = make<int8_t>(DType::I8, {3}, {-100, 5, 100}), ilo = make<int8_t>(DType::I8, {}, {-10});
  expectValues(runOk("Clip", {&i, &ilo}, DType::I8, {3}), {-10, 5, 100});
  Tensor wrongType = i64({}, {0});
  EXPECT_NE(run("Clip", {&x, &wrongType}, {{DType::F32, {5}}}).error, "");
}

TEST(ElementwiseMisc, IdentityAndDropout) {
  Tensor x = f32({2, 2}, {1, -2, 3, -4});
  expectValues(runOk("Identity", {&x}, DType::F32, {2, 2}), {1, -2, 3, -4});
  KernelRun d = run("Dropout", {&x}, {{DType::F32, {2, 2}}, {DType::Bool, {2, 2}}});
  ASSERT_EQ(d.error, "");
  expectValues(d[0], {1, -2, 3, -4});
  expectValues(d[1], {1, 1, 1, 1});
  KernelRun noMask = run("Dropout", {&x}, {{DType::F32, {2, 2}}, {DType::Undefined, {}}});
  EXPECT_EQ(noMask.error, "");
  Tensor ratio = f32({}, {0.5f}), train = boolean({}, {1}), infer = boolean({}, {0});
  EXPECT_EQ(run("Dropout", {&x, &ratio, &infer}, {{DType::F32, {2, 2}}}).error, "");
  EXPECT_NE(run("Dropout", {&x, &ratio, &train}, {{DType::F32, {2, 2}}}).error.find("training_mode"),
            std::string::npos);
}

} // namespace
