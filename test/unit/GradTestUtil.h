#pragma once
// Helpers of the elementwise/shape/reduction gradient tests: operand
// builders for gradCheck, and a direct run of a rule's gradients (for hand
// computed expectations at ties, where finite differences are ambiguous,
// and for f32 runs).
#include "GradCheck.h"

namespace megac::testing::grad {

constexpr double kTol = 1e-6;

inline GradCheckInput in(Shape shape, uint32_t seed, double lo = -1, double hi = 1) {
  return {randomTensor(DType::F64, std::move(shape), seed, lo, hi)};
}
inline GradCheckInput of(Tensor t) { return {std::move(t)}; }
// An operand that is not differentiated, fed at run time.
inline GradCheckInput fixed(Tensor t) { return {std::move(t), /*differentiate=*/false}; }
// A compile-time constant operand (shapes, axes, starts).
inline GradCheckInput constant(Tensor t) { return {std::move(t), /*differentiate=*/false, /*constant=*/true}; }
inline GradCheckInput none() { return {Tensor(), false}; }

inline Tensor i64s(std::vector<int64_t> v) {
  return Tensor::fromVector<int64_t>(DType::I64, {int64_t(v.size())}, v);
}
inline Tensor i64scalar(int64_t v) { return Tensor::fromVector<int64_t>(DType::I64, {}, {v}); }
inline Tensor f64s(Shape shape, std::vector<double> v) { return Tensor::fromVector<double>(DType::F64, shape, v); }
inline Tensor bools(Shape shape, std::vector<uint8_t> v) { return Tensor::fromVector<uint8_t>(DType::Bool, shape, v); }
inline Tensor castTo(const Tensor &t, DType dt) {
  Tensor c(dt, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) c.setFromDouble(i, t.getAsDouble(i));
  return c;
}

inline Attrs attrs(std::initializer_list<std::pair<const char *, Attr>> kv) {
  Attrs a;
  for (auto &p : kv) a.set(p.first, p.second);
  return a;
}
inline Attr I(int64_t v) { return Attr::ofInt(v); }
inline Attr Is(std::vector<int64_t> v) { return Attr::ofInts(std::move(v)); }
inline Attr S(std::string v) { return Attr::ofString(std::move(v)); }

// The gradients of sum_k <seeds[k], y_k> with respect to the differentiated
// inputs, where y = op(inputs); an undefined seed leaves that output
// without gradient. Returns an empty vector (after a gtest failure) on error.
inline std::vector<Tensor> analyticGrads(const std::string &opType, const std::vector<GradCheckInput> &inputs,
                                         const std::vector<Tensor> &seeds, Attrs a = {}) {
  SingleOpGraph s = singleOpGraph(opType, inputs, a, seeds.size());
  if (s.op < 0) return {};
  return seededGrads(s, seeds);
}

inline void expectTensorNear(const Tensor &got, const std::vector<double> &want, double tol = 1e-12) {
  ASSERT_EQ(got.numel(), int64_t(want.size()));
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_NEAR(got.getAsDouble(i), want[size_t(i)], tol) << "at " << i;
}

// Runs the rule in f32 on the f64 inputs rounded to f32 and compares with the
// f64 run; returns the worst relative difference (the rules are dtype
// generic: their constants must follow the operand dtype).
inline double f32VersusF64(const std::string &opType, const std::vector<GradCheckInput> &inputs, Attrs a = {},
                           size_t numOutputs = 1) {
  auto toF32 = [](std::vector<GradCheckInput> v) {
    for (auto &x : v)
      if (x.value.defined() && x.value.dtype() == DType::F64) x.value = castTo(x.value, DType::F32);
    return v;
  };
  std::vector<GradCheckInput> in32 = toF32(inputs);
  // The seed of output 0 comes from its inferred shape.
  SingleOpGraph probe = singleOpGraph(opType, inputs, a, numOutputs);
  if (probe.op < 0) return INFINITY;
  Tensor seed = randomTensor(DType::F64, probe.g.type(probe.g.ops[size_t(probe.op)].outputs[0]).shape, 99);
  std::vector<Tensor> seeds64(numOutputs), seeds32(numOutputs);
  seeds64[0] = seed;
  seeds32[0] = castTo(seed, DType::F32);
  auto g64 = analyticGrads(opType, inputs, seeds64, a);
  auto g32 = analyticGrads(opType, in32, seeds32, a);
  if (g64.size() != g32.size() || g64.empty()) return INFINITY;
  double worst = 0;
  for (size_t k = 0; k < g64.size(); ++k) {
    EXPECT_EQ(g32[k].dtype(), DType::F32);
    double num = 0, den = 0;
    for (int64_t e = 0; e < g64[k].numel(); ++e) {
      double d = g32[k].getAsDouble(e) - g64[k].getAsDouble(e);
      num += d * d;
      den += g64[k].getAsDouble(e) * g64[k].getAsDouble(e);
    }
    worst = std::max(worst, std::sqrt(num) / std::max(std::sqrt(den), 1e-12));
  }
  return worst;
}

} // namespace megac::testing::grad
