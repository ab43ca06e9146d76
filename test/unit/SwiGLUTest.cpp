// megac.SwiGLU and its gradient megac.SwiGLUGrad: finite differences in
// float64 against the rule (passes/autodiff/SwiGLUGrads.cpp), the f32 run
// against f64, hand-computed kernel values (also at saturated sigmoids and
// in f16), and the kernels' refusals of mismatched operands.
#include "GradTestUtil.h"
#include "runtime/cpu/Kernel.h"

#include <cmath>

using namespace megac;
using namespace megac::testing;
using namespace megac::testing::grad;

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// Runs op on the CPU into outputs of G's (input `gIndex`) type.
std::vector<Tensor> runCpu(const std::string &op, std::vector<const Tensor *> ins, size_t numOutputs,
                           size_t gIndex, std::string *error = nullptr) {
  std::vector<Tensor> outs;
  for (size_t i = 0; i < numOutputs; ++i) outs.emplace_back(ins[gIndex]->dtype(), ins[gIndex]->shape());
  std::vector<Tensor *> ptrs;
  for (Tensor &t : outs) ptrs.push_back(&t);
  Attrs a;
  cpu::KernelContext c{a, ins, ptrs};
  if (llvm::Error e = cpu::runKernel(op, c)) {
    std::string msg = llvm::toString(std::move(e));
    if (error) *error = msg;
    else ADD_FAILURE() << msg;
    return {};
  }
  return outs;
}

TEST(SwiGLUGrad, MatchesFiniteDifferences) {
  EXPECT_LT(gradCheck("megac.SwiGLU", {in({3, 4}, 1, -4, 4), in({3, 4}, 2)}), kTol);
  EXPECT_LT(gradCheck("megac.SwiGLU", {in({}, 3, -2, 2), in({}, 4)}), kTol);
  EXPECT_LT(gradCheck("megac.SwiGLU", {in({2, 3, 5}, 5, -8, 8), in({2, 3, 5}, 6, -2, 2)}), kTol);
}

TEST(SwiGLUGrad, OnlyOneOperandDifferentiated) {
  Tensor g = randomTensor(DType::F64, {2, 3}, 7, -3, 3), u = randomTensor(DType::F64, {2, 3}, 8);
  EXPECT_LT(gradCheck("megac.SwiGLU", {in({2, 3}, 7, -3, 3), fixed(u)}), kTol);
  EXPECT_LT(gradCheck("megac.SwiGLU", {fixed(g), in({2, 3}, 8)}), kTol);
}

TEST(SwiGLUGrad, F32AgreesWithF64) {
  EXPECT_LT(f32VersusF64("megac.SwiGLU", {in({4, 9}, 9, -6, 6), in({4, 9}, 10, -2, 2)}), 1e-5);
}

TEST(SwiGLUKernel, HandComputed) {
  Tensor g = f64s({5}, {0, 1, -1, 60, -60}), u = f64s({5}, {2, 3, 4, 0.5, 7});
  auto y = runCpu("megac.SwiGLU", {&g, &u}, 1, 0);
  ASSERT_EQ(y.size(), 1u);
  expectTensorNear(y[0], {0, 3 * sigmoid(1), -4 * sigmoid(-1), 30, 0}, 1e-14);

  // dG = dy u s (1 + g (1 - s)), dU = dy g s; at g = 0: dG = dy u / 2, dU = 0.
  Tensor dy = f64s({5}, {1, 2, 1, 1, 1});
  auto d = runCpu("megac.SwiGLUGrad", {&dy, &g, &u}, 2, 1);
  ASSERT_EQ(d.size(), 2u);
  const double s1 = sigmoid(1), sm1 = sigmoid(-1);
  expectTensorNear(d[0], {1, 2 * 3 * s1 * (1 + (1 - s1)), 4 * sm1 * (1 - (1 - sm1)), 0.5, 0}, 1e-14);
  expectTensorNear(d[1], {0, 2 * s1, -sm1, 60, 0}, 1e-14);
}

TEST(SwiGLUKernel, HalfPrecisionThroughF32) {
  Tensor g = castTo(f64s({3}, {0.5, -2, 3}), DType::F16), u = castTo(f64s({3}, {1, 0.25, -1}), DType::F16);
  auto y = runCpu("megac.SwiGLU", {&g, &u}, 1, 0);
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].dtype(), DType::F16);
  expectTensorNear(y[0], {0.5 * sigmoid(0.5), -0.5 * sigmoid(-2), -3 * sigmoid(3)}, 2e-3);
}

TEST(SwiGLUKernel, RefusesMismatchedOperands) {
  Tensor g = f64s({2}, {1, 2}), u = f64s({1}, {1}), u32 = castTo(f64s({2}, {1, 2}), DType::F32);
  std::string error;
  EXPECT_TRUE(runCpu("megac.SwiGLU", {&g, &u}, 1, 0, &error).empty());
  EXPECT_NE(error.find("megac.SwiGLU"), std::string::npos) << error;
  EXPECT_TRUE(runCpu("megac.SwiGLU", {&g, &u32}, 1, 0, &error).empty());
  Tensor i = Tensor::fromVector<int64_t>(DType::I64, {2}, {1, 2});
  EXPECT_TRUE(runCpu("megac.SwiGLU", {&i, &i}, 1, 0, &error).empty());
  EXPECT_NE(error.find("not supported"), std::string::npos) << error;
  EXPECT_TRUE(runCpu("megac.SwiGLUGrad", {&g, &g, &u}, 2, 1, &error).empty());
}

TEST(SwiGLUInfer, SameTypeRequired) {
  ir::Graph g;
  g.opset = 23;
  auto add = [&](const char *name, DType dt, Shape s) {
    ir::Value v;
    v.name = name;
    v.type = {dt, std::move(s), false};
    v.kind = ir::ValueKind::Input;
    return g.addValueUnique(std::move(v));
  };
  ir::ValueId a = add("a", DType::F32, {2, 3}), b = add("b", DType::F32, {3}), c = add("c", DType::F32, {2, 3});
  auto infer = [&](std::vector<ir::ValueId> ins) {
    ir::Op op;
    op.type = "megac.SwiGLU";
    op.inputs = std::move(ins);
    ir::Value out;
    out.name = "y";
    op.outputs = {g.addValueUnique(std::move(out))};
    int32_t idx = g.addOp(std::move(op));
    ir::InferContext ctx(g, idx);
    llvm::Error e = ir::lookupOpSchema("megac.SwiGLU")->infer(ctx);
    std::string msg = e ? llvm::toString(std::move(e)) : "";
    return std::make_pair(msg, g.type(g.ops[size_t(idx)].outputs[0]));
  };
  auto ok = infer({a, c});
  EXPECT_EQ(ok.first, "");
  EXPECT_EQ(ok.second.shape, (Shape{2, 3}));
  EXPECT_NE(infer({a, b}).first.find("must have G's type"), std::string::npos);
  EXPECT_NE(infer({a, ir::kNoValue}).first.find("required"), std::string::npos);
}

} // namespace
