// CUDA elementwise kernels (runtime/cuda/ElementwiseKernels.cu) against the
// CPU kernels: every registered op, broadcasting patterns that take each
// launch path (flat, flat with a scalar, broadcast, 4-wide broadcast rows),
// integer and bool types, Cast between every supported pair, and tensors
// large enough for the vectorized loops and their tails.
#include "RowOpsTestUtil.h"

#include <cmath>
#include <limits>

namespace megac::gputest {
namespace {


Shape broadcastOf(const std::vector<Shape> &shapes) {
  size_t rank = 0;
  for (const Shape &s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape &s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t &o = out[rank - s.size() + i];
      if (s[i] != 1) o = s[i];
    }
  return out;
}

// Values in [lo, hi); integer types get integers, bool 0/1.
Tensor rnd(Shape s, unsigned seed, DType dt = DType::F32, double lo = -1, double hi = 1) {
  if (dt == DType::Bool) return randomTensor(std::move(s), seed, dt, 0, 2);
  return randomTensor(std::move(s), seed, dt, lo, hi);
}

// Floats with small integer values, so comparisons see equal elements.
Tensor smallInts(Shape s, unsigned seed, DType dt) {
  Tensor t = randomTensor(s, seed, DType::F64, -3, 3);
  Tensor r(dt, s);
  for (int64_t i = 0; i < t.numel(); ++i) r.setFromDouble(i, std::floor(t.getAsDouble(i)));
  return r;
}

OpCase makeCase(const std::string &op, std::vector<Tensor> inputs, DType outType, Attrs attrs = {}) {
  OpCase c;
  c.op = op;
  c.attrs = std::move(attrs);
  std::vector<Shape> shapes;
  for (const Tensor &t : inputs)
    if (t.raw()) shapes.push_back(t.shape());
  c.outputs = {{outType, broadcastOf(shapes)}};
  c.inputs = std::move(inputs);
  return c;
}

struct Pattern {
  Shape a, b;
};

// Equal shapes, scalars, [1], trailing and middle broadcasts, both sides
// broadcast, empty tensors, rows of 1000 (4-wide broadcast path) and of 1003.
const Pattern kPatterns[] = {
    {{2, 3, 4}, {4}},          {{2, 1, 4}, {3, 1}},       {{2, 3, 4}, {}},          {{}, {2, 3, 4}},
    {{1}, {5}},                {{5}, {1}},                {{3, 1, 5}, {1, 4, 1}},   {{2, 3, 4}, {2, 3, 4}},
    {{7}, {7}},                {{4, 1, 6}, {4, 5, 6}},    {{2, 3, 1000}, {1000}},   {{2, 3, 1000}, {2, 1, 1000}},
    {{1, 1, 1}, {1}},          {{0, 3}, {3}},             {{3, 1}, {1, 1003}},      {{8, 1, 16}, {1, 12, 16}},
    {{2, 3, 4, 5, 6}, {3, 1, 5, 1}}, {{6, 1, 1, 4}, {1, 5, 7, 1}}, {{}, {}},
};

TEST(ElementwiseGpu, FloatBinaryOpsOverBroadcastPatterns) {
  unsigned seed = 1;
  for (const char *op : {"Add", "Sub", "Mul", "Div", "Max", "Min"})
    for (const Pattern &p : kPatterns) {
      SCOPED_TRACE(std::string(op) + " " + shapeToString(p.a) + " " + shapeToString(p.b));
      // Divisors away from 0 (either sign).
      Tensor b = rnd(p.b, seed++, DType::F32, 0.5, 2);
      for (int64_t i = 0; i < b.numel(); i += 2) b.setFromDouble(i, -b.getAsDouble(i));
      EXPECT_GPU_MATCHES_CPU(makeCase(op, {rnd(p.a, seed++), b}, DType::F32), gpu(), 1e-6);
    }
}

TEST(ElementwiseGpu, IntegerArithmeticIncludingDivisionByZero) {
  unsigned seed = 10;
  for (DType dt : {DType::I64, DType::I32})
    for (const char *op : {"Add", "Sub", "Mul", "Div", "Max", "Min"})
      for (const Pattern &p : {Pattern{{4, 5}, {4, 5}}, Pattern{{4, 5}, {5}}, Pattern{{3, 1, 7}, {4, 1}},
                               Pattern{{9}, {}}}) {
        SCOPED_TRACE(std::string(op) + " " + dtypeName(dt) + " " + shapeToString(p.a) + shapeToString(p.b));
        EXPECT_GPU_MATCHES_CPU(makeCase(op, {rnd(p.a, seed++, dt, -50, 50), rnd(p.b, seed++, dt, -3, 3)}, dt), gpu(),
                               0);
      }
}

TEST(ElementwiseGpu, Pow) {
  // Same types, x^2 with a scalar exponent, mixed float/int exponents, integers.
  EXPECT_GPU_MATCHES_CPU(makeCase("Pow", {rnd({4, 33}, 1, DType::F32, 0.1, 3), rnd({4, 33}, 2, DType::F32, -2, 2)},
                                  DType::F32),
                         gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(makeCase("Pow", {rnd({2, 3, 8}, 3, DType::F32, -3, 3), Tensor::scalar(2.0f)}, DType::F32),
                         gpu(), 1e-6);
  EXPECT_GPU_MATCHES_CPU(makeCase("Pow", {rnd({2, 1, 8}, 4, DType::F32, 0.1, 3), rnd({3, 1}, 5, DType::F32, -2, 2)},
                                  DType::F32),
                         gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(makeCase("Pow", {rnd({5, 7}, 6, DType::F32, -3, 3), rnd({7}, 7, DType::I64, -3, 4)},
                                  DType::F32),
                         gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(makeCase("Pow", {rnd({5, 7}, 8, DType::F32, 0.1, 3), rnd({}, 9, DType::I32, 2, 4)},
                                  DType::F32),
                         gpu(), 1e-5);
  for (DType dt : {DType::I64, DType::I32})
    EXPECT_GPU_MATCHES_CPU(makeCase("Pow", {rnd({6, 5}, 10, dt, -4, 5), rnd({5}, 11, dt, -2, 6)}, dt), gpu(), 0);
}

TEST(ElementwiseGpu, Comparisons) {
  unsigned seed = 20;
  for (const char *op : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
    for (DType dt : {DType::F32, DType::I64, DType::I32})
      for (const Pattern &p : {Pattern{{4, 6}, {4, 6}}, Pattern{{2, 3, 8}, {8}}, Pattern{{2, 1, 5}, {3, 1}},
                               Pattern{{7}, {}}, Pattern{{3, 1000}, {1000}}}) {
        SCOPED_TRACE(std::string(op) + " " + dtypeName(dt) + " " + shapeToString(p.a) + shapeToString(p.b));
        EXPECT_GPU_MATCHES_CPU(makeCase(op, {smallInts(p.a, seed++, dt), smallInts(p.b, seed++, dt)}, DType::Bool),
                               gpu(), 0);
      }
  EXPECT_GPU_MATCHES_CPU(makeCase("Equal", {rnd({3, 4}, 30, DType::Bool), rnd({4}, 31, DType::Bool)}, DType::Bool),
                         gpu(), 0);
  // NaN compares unequal to everything, itself included.
  Tensor a = Tensor::fromVector<float>(DType::F32, {4}, {NAN, 1.0f, NAN, -2.0f});
  Tensor b = Tensor::fromVector<float>(DType::F32, {4}, {NAN, 1.0f, 0.0f, NAN});
  for (const char *op : {"Equal", "Less", "GreaterOrEqual"})
    EXPECT_GPU_MATCHES_CPU(makeCase(op, {a, b}, DType::Bool), gpu(), 0);
}

TEST(ElementwiseGpu, LogicOps) {
  unsigned seed = 40;
  for (const char *op : {"And", "Or", "Xor"})
    for (const Pattern &p : {Pattern{{5, 7}, {5, 7}}, Pattern{{2, 3, 4}, {4}}, Pattern{{2, 1, 4}, {3, 1}},
                             Pattern{{6}, {}}, Pattern{{4, 1024}, {1, 1024}}}) {
      SCOPED_TRACE(std::string(op) + " " + shapeToString(p.a) + shapeToString(p.b));
      EXPECT_GPU_MATCHES_CPU(makeCase(op, {rnd(p.a, seed++, DType::Bool), rnd(p.b, seed++, DType::Bool)}, DType::Bool),
                             gpu(), 0);
    }
  EXPECT_GPU_MATCHES_CPU(makeCase("Not", {rnd({3, 5, 7}, 50, DType::Bool)}, DType::Bool), gpu(), 0);
}

TEST(ElementwiseGpu, NaNPropagatesThroughMaxMin) {
  Tensor a = Tensor::fromVector<float>(DType::F32, {4}, {NAN, 1.0f, 3.0f, -2.0f});
  Tensor b = Tensor::fromVector<float>(DType::F32, {4}, {0.0f, NAN, 2.0f, NAN});
  for (const char *op : {"Max", "Min"}) EXPECT_GPU_MATCHES_CPU(makeCase(op, {a, b}, DType::F32), gpu(), 0);
}

TEST(ElementwiseGpu, VariadicOps) {
  const std::vector<Shape> shapes{{2, 3, 4}, {4}, {3, 1}};
  for (const char *op : {"Max", "Min", "Sum", "Mean"}) {
    SCOPED_TRACE(op);
    std::vector<Tensor> ins;
    for (size_t i = 0; i < shapes.size(); ++i) ins.push_back(rnd(shapes[i], unsigned(60 + i)));
    EXPECT_GPU_MATCHES_CPU(makeCase(op, ins, DType::F32), gpu(), 1e-6);
    EXPECT_GPU_MATCHES_CPU(makeCase(op, {rnd({3, 4}, 63)}, DType::F32), gpu(), 0);
    EXPECT_GPU_MATCHES_CPU(makeCase(op, {rnd({3, 4}, 64), rnd({3, 4}, 65)}, DType::F32), gpu(), 1e-6);
  }
  EXPECT_GPU_MATCHES_CPU(makeCase("Sum", {rnd({4, 5}, 66, DType::I64, -9, 9), rnd({5}, 67, DType::I64, -9, 9),
                                          rnd({4, 1}, 68, DType::I64, -9, 9)},
                                  DType::I64),
                         gpu(), 0);
}

struct UnaryCase {
  const char *op;
  double lo, hi;
  double tol;
};

const UnaryCase kFloatUnary[] = {
    {"Sqrt", 0.01, 4, 1e-6},     {"Reciprocal", 0.25, 4, 1e-6}, {"Exp", -5, 5, 1e-5},      {"Log", 0.01, 5, 1e-5},
    {"Cos", -6, 6, 1e-5},        {"Sin", -6, 6, 1e-5},          {"Tanh", -5, 5, 1e-5},     {"Erf", -3, 3, 1e-5},
    {"Floor", -9, 9, 0},         {"Ceil", -9, 9, 0},            {"Sigmoid", -20, 20, 1e-5}, {"Softplus", -30, 30, 1e-5},
    {"Softsign", -5, 5, 1e-6},   {"HardSwish", -5, 5, 1e-6},    {"Mish", -8, 8, 1e-5},     {"Gelu", -6, 6, 1e-5},
    {"LeakyRelu", -3, 3, 1e-6},  {"Elu", -4, 4, 1e-5},          {"Selu", -4, 4, 1e-5},     {"HardSigmoid", -5, 5, 1e-6},
    {"Neg", -3, 3, 0},           {"Relu", -3, 3, 0},            {"Abs", -3, 3, 0},         {"Sign", -3, 3, 0},
};

// Odd element counts leave a tail after the 4-wide groups.
TEST(ElementwiseGpu, FloatUnaryOps) {
  unsigned seed = 100;
  for (const UnaryCase &u : kFloatUnary)
    for (DType dt : {DType::F32, DType::F64})
      for (const Shape &s : {Shape{3, 5, 7}, Shape{}, Shape{1}, Shape{0}, Shape{4, 256}}) {
        SCOPED_TRACE(std::string(u.op) + " " + dtypeName(dt) + " " + shapeToString(s));
        EXPECT_GPU_MATCHES_CPU(makeCase(u.op, {rnd(s, seed++, dt, u.lo, u.hi)}, dt), gpu(), u.tol);
      }
}

TEST(ElementwiseGpu, UnaryAttributes) {
  Tensor x = rnd({3, 5, 7}, 200, DType::F32, -5, 5);
  EXPECT_GPU_MATCHES_CPU(makeCase("Gelu", {x}, DType::F32, makeAttrs({{"approximate", Attr::ofString("tanh")}})),
                         gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(makeCase("Gelu", {x}, DType::F32, makeAttrs({{"approximate", Attr::ofString("none")}})),
                         gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(makeCase("LeakyRelu", {x}, DType::F32, makeAttrs({{"alpha", Attr::ofFloat(0.2f)}})), gpu(),
                         1e-6);
  EXPECT_GPU_MATCHES_CPU(makeCase("Elu", {x}, DType::F32, makeAttrs({{"alpha", Attr::ofFloat(0.5f)}})), gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(makeCase("Selu", {x}, DType::F32,
                                  makeAttrs({{"alpha", Attr::ofFloat(1.5f)}, {"gamma", Attr::ofFloat(2.0f)}})),
                         gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(makeCase("HardSigmoid", {x}, DType::F32,
                                  makeAttrs({{"alpha", Attr::ofFloat(0.3f)}, {"beta", Attr::ofFloat(0.4f)}})),
                         gpu(), 1e-6);
}

TEST(ElementwiseGpu, SignedIntegerUnaryOps) {
  for (const char *op : {"Neg", "Abs", "Relu", "Sign"})
    for (DType dt : {DType::I64, DType::I32}) {
      SCOPED_TRACE(std::string(op) + " " + dtypeName(dt));
      EXPECT_GPU_MATCHES_CPU(makeCase(op, {rnd({3, 5, 7}, 300, dt, -20, 20)}, dt), gpu(), 0);
    }
}

// Halves round to even; NaN passes through Relu and the rounding ops.
TEST(ElementwiseGpu, RoundingAndNaN) {
  Tensor x = Tensor::fromVector<float>(DType::F32, {10},
                                       {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 2.4f, -2.6f, NAN, 0.0f});
  for (const char *op : {"Round", "Floor", "Ceil", "Relu", "Abs", "Neg", "Sign"})
    EXPECT_GPU_MATCHES_CPU(makeCase(op, {x}, DType::F32), gpu(), 0);
}

TEST(ElementwiseGpu, IsNaNAndIsInf) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = Tensor::fromVector<float>(DType::F32, {7}, {1.0f, NAN, inf, -inf, 0.0f, -3.0f, 3e38f});
  EXPECT_GPU_MATCHES_CPU(makeCase("IsNaN", {x}, DType::Bool), gpu(), 0);
  for (int64_t neg : {0, 1})
    for (int64_t pos : {0, 1})
      EXPECT_GPU_MATCHES_CPU(makeCase("IsInf", {x}, DType::Bool,
                                      makeAttrs({{"detect_negative", Attr::ofInt(neg)},
                                                 {"detect_positive", Attr::ofInt(pos)}})),
                             gpu(), 0);
  Tensor d = convertTo(x, DType::F64);
  EXPECT_GPU_MATCHES_CPU(makeCase("IsNaN", {d}, DType::Bool), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(makeCase("IsInf", {d}, DType::Bool), gpu(), 0);
}

TEST(ElementwiseGpu, GeluGrad) {
  for (const char *mode : {"none", "tanh"})
    for (const Shape &s : {Shape{3, 5, 7}, Shape{1}, Shape{1000003}}) {
      SCOPED_TRACE(std::string(mode) + " " + shapeToString(s));
      OpCase c = makeCase("megac.GeluGrad", {rnd(s, 400, DType::F32, -2, 2), rnd(s, 401, DType::F32, -6, 6)},
                          DType::F32, makeAttrs({{"approximate", Attr::ofString(mode)}}));
      EXPECT_GPU_MATCHES_CPU(c, gpu(), 1e-5);
    }
  OpCase d = makeCase("megac.GeluGrad", {rnd({4, 9}, 402, DType::F64), rnd({4, 9}, 403, DType::F64, -4, 4)},
                      DType::F64);
  EXPECT_GPU_MATCHES_CPU(d, gpu(), 1e-12);
}

TEST(ElementwiseGpu, WhereWithBroadcastBoolCondition) {
  struct W {
    Shape c, x, y;
  };
  unsigned seed = 500;
  for (const W &w : {W{{2, 1, 4}, {3, 1}, {}}, W{{5, 6}, {5, 6}, {5, 6}}, W{{6}, {}, {}}, W{{3, 1}, {3, 4}, {4}},
                     W{{1, 1024}, {64, 1024}, {}}, W{{64, 1}, {64, 1024}, {1024}}, W{{}, {3, 5}, {3, 5}},
                     W{{2, 1, 3, 1}, {1, 4, 1, 5}, {2, 4, 3, 5}}})
    for (DType dt : {DType::F32, DType::I64, DType::Bool, DType::F16, DType::I32}) {
      SCOPED_TRACE(shapeToString(w.c) + shapeToString(w.x) + shapeToString(w.y) + " " + dtypeName(dt));
      OpCase c = makeCase("Where", {rnd(w.c, seed++, DType::Bool), rnd(w.x, seed++, dt, -9, 9),
                                    rnd(w.y, seed++, dt, -9, 9)},
                          dt);
      EXPECT_GPU_MATCHES_CPU(c, gpu(), 0);
    }
}

// Every pair of the types Cast supports on the GPU, with values that wrap,
// truncate toward zero, round to half precision and a NaN.
TEST(ElementwiseGpu, CastEveryPair) {
  const DType types[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8,
                         DType::I32, DType::I64, DType::U8,  DType::Bool};
  unsigned seed = 600;
  for (DType from : types) {
    Tensor x;
    if (from == DType::U8) x = rnd({5, 41}, seed++, from, 0, 256);
    else if (from == DType::I8) x = rnd({5, 41}, seed++, from, -128, 128);
    else if (from == DType::Bool) x = rnd({5, 41}, seed++, from);
    else x = rnd({5, 41}, seed++, from, -1000, 1000);
    if (isFloatType(from)) x.setFromDouble(3, NAN);
    for (DType to : types) {
      SCOPED_TRACE(std::string(dtypeName(from)) + " -> " + dtypeName(to));
      OpCase c = makeCase("Cast", {x}, to, makeAttrs({{"to", Attr::ofInt(int64_t(to))}}));
      EXPECT_GPU_MATCHES_CPU(c, gpu(), 0);
    }
  }
}

// Float -> integer: truncation toward zero, saturation beyond int64 and the
// wrap of narrower integers.
TEST(ElementwiseGpu, CastOutOfRangeFloats) {
  Tensor x = Tensor::fromVector<float>(DType::F32, {10},
                                       {3e9f, -3e9f, 1e20f, -1e20f, 300.7f, -300.7f, -0.9f, 0.9f, NAN, 65535.5f});
  for (DType to : {DType::I8, DType::I32, DType::I64, DType::U8, DType::Bool}) {
    SCOPED_TRACE(dtypeName(to));
    EXPECT_GPU_MATCHES_CPU(makeCase("Cast", {x}, to, makeAttrs({{"to", Attr::ofInt(int64_t(to))}})), gpu(), 0);
  }
  OpCase like = makeCase("CastLike", {x, Tensor(DType::I32, {})}, DType::I32);
  EXPECT_GPU_MATCHES_CPU(like, gpu(), 0);
}

TEST(ElementwiseGpu, Clip) {
  Tensor x = rnd({3, 5, 7}, 700, DType::F32, -3, 3);
  x.setFromDouble(4, NAN);
  Tensor lo = Tensor::scalar(-1.0f), hi = Tensor::scalar(0.5f);
  EXPECT_GPU_MATCHES_CPU(makeCase("Clip", {x}, DType::F32), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(makeCase("Clip", {x, lo}, DType::F32), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(makeCase("Clip", {x, Tensor(), hi}, DType::F32), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(makeCase("Clip", {x, lo, hi}, DType::F32), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(makeCase("Clip", {x, hi, lo}, DType::F32), gpu(), 0); // min > max: all max
  OpCase constant = makeCase("Clip", {x, lo, hi}, DType::F32);
  constant.constant = {false, true, true};
  EXPECT_GPU_MATCHES_CPU(constant, gpu(), 0);
  Tensor xi = rnd({4, 9}, 701, DType::I64, -20, 20);
  EXPECT_GPU_MATCHES_CPU(makeCase("Clip", {xi, int64s({}, {-5}), int64s({}, {7})}, DType::I64), gpu(), 0);
}

TEST(ElementwiseGpu, IdentityAndDropout) {
  for (DType dt : {DType::F32, DType::I64, DType::Bool, DType::BF16})
    EXPECT_GPU_MATCHES_CPU(makeCase("Identity", {rnd({3, 7}, 800, dt, -5, 5)}, dt), gpu(), 0);
  OpCase d = makeCase("Dropout", {rnd({4, 9}, 801), Tensor::scalar(0.1f), Tensor(DType::Bool, {})}, DType::F32);
  d.outputs.push_back({DType::Bool, {4, 9}});
  d.constant = {false, true, true};
  EXPECT_GPU_MATCHES_CPU(d, gpu(), 0);
}

// Sizes that are not multiples of 4 test the scalar tail after the vector loop.
TEST(ElementwiseGpu, LargeTensors) {
  const int64_t n = 5'000'003;
  Tensor a = rnd({n}, 900), b = rnd({n}, 901);
  EXPECT_GPU_MATCHES_CPU(makeCase("Add", {a, b}, DType::F32), gpu(), 1e-6);
  EXPECT_GPU_MATCHES_CPU(makeCase("Mul", {a, Tensor::scalar(1.5f)}, DType::F32), gpu(), 1e-6);
  EXPECT_GPU_MATCHES_CPU(makeCase("Sub", {Tensor::scalar(0.25f), b}, DType::F32), gpu(), 1e-6);
  EXPECT_GPU_MATCHES_CPU(makeCase("Exp", {a}, DType::F32), gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(makeCase("Gelu", {a}, DType::F32), gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(makeCase("Sigmoid", {a}, DType::F32), gpu(), 1e-5);
  EXPECT_GPU_MATCHES_CPU(makeCase("Greater", {a, b}, DType::Bool), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(makeCase("Add", {rnd({5'000'000}, 902), rnd({5'000'000}, 903)}, DType::F32), gpu(), 1e-6);
  // Broadcast rows: [1250, 4000] + [4000] (4-wide) and + [1250, 1] (row scalar).
  Tensor m = rnd({1250, 4000}, 904);
  EXPECT_GPU_MATCHES_CPU(makeCase("Add", {m, rnd({4000}, 905)}, DType::F32), gpu(), 1e-6);
  EXPECT_GPU_MATCHES_CPU(makeCase("Mul", {m, rnd({1250, 1}, 906)}, DType::F32), gpu(), 1e-6);
  EXPECT_GPU_MATCHES_CPU(makeCase("Div", {rnd({1250, 1}, 907), rnd({4001}, 908, DType::F32, 0.5, 2)}, DType::F32),
                         gpu(), 1e-6);
  // An attention-mask pattern: [B, 1, S, S] + [B, H, S, S].
  EXPECT_GPU_MATCHES_CPU(makeCase("Add", {rnd({2, 1, 512, 512}, 909), rnd({2, 8, 512, 512}, 910)}, DType::F32), gpu(),
                         1e-6);
  EXPECT_GPU_MATCHES_CPU(makeCase("Where", {rnd({1, 1, 512, 512}, 911, DType::Bool), rnd({2, 8, 512, 512}, 912),
                                            Tensor::scalar(-1e9f)},
                                  DType::F32),
                         gpu(), 0);
  for (DType to : {DType::BF16, DType::F16, DType::I64})
    EXPECT_GPU_MATCHES_CPU(makeCase("Cast", {a}, to, makeAttrs({{"to", Attr::ofInt(int64_t(to))}})), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(makeCase("Cast", {rnd({n}, 913, DType::Bool)}, DType::F32,
                                  makeAttrs({{"to", Attr::ofInt(int64_t(DType::F32))}})),
                         gpu(), 0);
}

// The GPU runs f16/bf16 only through Cast, Where and copies (activations are
// f32), and f64 only in unary ops: other cases report it.
TEST(ElementwiseGpu, UnsupportedTypeIsAnError) {
  Tensor a = rnd({3, 4}, 1000, DType::F16), b = rnd({4}, 1001, DType::F16);
  EXPECT_GPU_ERROR(makeCase("Add", {a, b}, DType::F16), gpu(), "not supported");
  EXPECT_GPU_ERROR(makeCase("Exp", {a}, DType::F16), gpu(), "not supported");
  // Binary ops take f32 and the index types, not f64.
  EXPECT_GPU_ERROR(makeCase("Mul", {rnd({3}, 1002, DType::F64), rnd({3}, 1003, DType::F64)}, DType::F64), gpu(),
                   "not supported");
}

} // namespace
} // namespace megac::gputest
