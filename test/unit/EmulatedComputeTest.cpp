// The CPU backend's emulation of the GPU compute modes (bf16 or tf32 operands
// in every matrix product, fp32 accumulation): the rounding itself, the
// products, and the bf16 numerics of training against PyTorch's bf16
// autocast on every fixture, the GPU tests' yardsticks run in CI.
#include "FixtureTestUtil.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/train/Trainer.h"
#include "runtime/train/Weights.h"
#include "runtime/weights/WeightFiles.h"

#include <gtest/gtest.h>

#include "llvm/Support/FileSystem.h"

#include <cmath>
#include <cstdio>
#include <random>

using namespace megac;
using namespace megac::testing;
using cpu::OperandRounding;

namespace {

TEST(OperandRounding, ToNearestEvenAtTheModesWidth) {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie (to even: 1), 1 + 3*2^-8 rounds up.
  EXPECT_EQ(cpu::roundOperand(1.0f + 0x1p-8f, OperandRounding::Bf16), 1.0f);
  EXPECT_EQ(cpu::roundOperand(1.0f + 3 * 0x1p-8f, OperandRounding::Bf16), 1.0f + 0x1p-6f);
  EXPECT_EQ(cpu::roundOperand(1.0f + 0x1p-7f + 0x1p-8f, OperandRounding::Bf16), 1.0f + 0x1p-6f); // tie to even
  EXPECT_EQ(cpu::roundOperand(-1.0f - 0x1p-8f - 0x1p-12f, OperandRounding::Bf16), -1.0f - 0x1p-7f);
  // tf32 keeps 11: 1 + 2^-11 is a tie, 1 + 2^-11 + 2^-14 rounds up.
  EXPECT_EQ(cpu::roundOperand(1.0f + 0x1p-11f, OperandRounding::Tf32), 1.0f);
  EXPECT_EQ(cpu::roundOperand(1.0f + 0x1p-11f + 0x1p-14f, OperandRounding::Tf32), 1.0f + 0x1p-10f);
  EXPECT_EQ(cpu::roundOperand(1.0f + 0x1p-11f, OperandRounding::None), 1.0f + 0x1p-11f);
  EXPECT_TRUE(std::isinf(cpu::roundOperand(INFINITY, OperandRounding::Bf16)));
  EXPECT_TRUE(std::isnan(cpu::roundOperand(NAN, OperandRounding::Tf32)));
}

// A product with rounding on equals the fp32-accumulated product of the
// rounded operands (computed here in double), whatever the transposes.
TEST(OperandRounding, SgemmRoundsBothOperands) {
  const int64_t M = 37, N = 29, K = 300;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> a(size_t(M * K)), b(size_t(K * N));
  for (float &x : a) x = nd(rng);
  for (float &x : b) x = nd(rng);
  for (OperandRounding r : {OperandRounding::Bf16, OperandRounding::Tf32}) {
    for (bool transA : {false, true})
      for (bool transB : {false, true}) {
        std::vector<float> c(size_t(M * N)), plain(size_t(M * N));
        cpu::setSgemmOperandRounding(r);
        cpu::sgemm(transA, transB, M, N, K, 1.0f, a.data(), transA ? M : K, b.data(), transB ? K : N, 0.0f, c.data(), N);
        cpu::setSgemmOperandRounding(OperandRounding::None);
        cpu::sgemm(transA, transB, M, N, K, 1.0f, a.data(), transA ? M : K, b.data(), transB ? K : N, 0.0f,
                   plain.data(), N);
        double worst = 0, moved = 0;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double want = 0;
            for (int64_t k = 0; k < K; ++k) {
              float x = transA ? a[size_t(k * M + i)] : a[size_t(i * K + k)];
              float y = transB ? b[size_t(j * K + k)] : b[size_t(k * N + j)];
              want += double(cpu::roundOperand(x, r)) * double(cpu::roundOperand(y, r));
            }
            worst = std::max(worst, std::abs(c[size_t(i * N + j)] - want));
            moved = std::max(moved, std::abs(plain[size_t(i * N + j)] - want));
          }
        EXPECT_LT(worst, 1e-4) << int(r) << " " << transA << transB;       // fp32 accumulation of 300 terms
        EXPECT_GT(moved, 10 * worst) << int(r) << " " << transA << transB; // and the rounding did change it
      }
  }
}

std::unique_ptr<runtime::Trainer> emulatingTrainer(const plan::Plan &p) {
  auto t = runtime::Trainer::create(p);
  if (!t) {
    ADD_FAILURE() << llvm::toString(t.takeError());
    return nullptr;
  }
  if (auto e = runtime::loadInitialWeights(p, (*t)->state(), {}, runtime::fileWeightReaders()); !e) {
    ADD_FAILURE() << llvm::toString(e.takeError());
    return nullptr;
  }
  (*t)->emulatePlanCompute(true);
  return std::move(*t);
}

// The first step's gradients of the fixture's batch with the plan's compute
// mode emulated (first) and in fp32 (second), host layout.
std::pair<std::vector<float>, std::vector<float>> firstStepGradients(const plan::Plan &p, const std::string &model) {
  auto emulated = emulatingTrainer(p), fp32 = emulatingTrainer(p);
  if (!emulated || !fp32) return {};
  fp32->emulatePlanCompute(false);
  Tensor ids = loadRef(model, "input_ids.pb"), targets = loadRef(model, "targets.pb");
  std::vector<float> ge(size_t(fp32->hostParamElements()), 0.0f), gf(ge.size(), 0.0f);
  auto le = emulated->forwardBackward(ids, targets, 1.0f, &ge, 0.0f);
  auto lf = fp32->forwardBackward(ids, targets, 1.0f, &gf, 0.0f);
  if (!le || !lf) {
    ADD_FAILURE() << (le ? "" : llvm::toString(le.takeError())) << (lf ? "" : llvm::toString(lf.takeError()));
    return {};
  }
  return {ge, gf};
}

class EmulatedBf16 : public ::testing::TestWithParam<const char *> {};

// The GPU test's bf16 criterion (test/gpu/GpuTrainTest.cpp) on the CPU: the
// mean over 16 one-ulp-nudged runs of max |loss - fp32 reference| over five
// AdamW steps is within 1.5x PyTorch autocast's mean over the same kind of
// ensemble.
TEST_P(EmulatedBf16, TrajectoryWithinPyTorchAutocastDistance) {
  const std::string model = GetParam();
  ASSERT_TRUE(llvm::sys::fs::exists(fixtureDir(model) + "/ref/losses_adamw_bf16_autocast_ensemble.pb"))
      << model << ": no PyTorch bf16-autocast ensemble (test/data/make_fixtures.py writes it)";
  Tensor ref = loadRef(model, "losses_adamw.pb"), ensemble = loadRef(model, "losses_adamw_bf16_autocast_ensemble.pb");
  const int64_t runs = ensemble.shape()[0];
  plan::Plan p = compileFixturePlan(model, "bf16");
  const double torch = meanTrajectoryDistance(ensemble, ref);
  double ours = 0;
  std::string draws;
  for (int64_t k = 0; k < runs; ++k) {
    auto t = emulatingTrainer(p);
    ASSERT_TRUE(t);
    const double d = trainedDistance(*t, model, ref, unsigned(k + 1));
    ours += d / double(runs);
    draws += " " + std::to_string(d).substr(0, 6);
  }
  std::printf("%s emulated bf16: mean of %lld nudged runs' max |loss - fp32 reference|: megac %.3g, PyTorch autocast "
              "%.3g (megac's runs:%s)\n",
              model.c_str(), (long long)runs, ours, torch, draws.c_str());
  EXPECT_LE(ours, 1.5 * torch) << model;
}

// First-step gradients with bf16 operands against fp32 ones, as PyTorch's
// autocast gradients against its fp32 ones (ref/grad_error_bf16_autocast.pb):
// the mean relative error over parameters and the fraction of flipped signs.
TEST_P(EmulatedBf16, GradientsNoFartherFromFp32ThanPyTorchAutocast) {
  const std::string model = GetParam();
  ASSERT_TRUE(llvm::sys::fs::exists(fixtureDir(model) + "/ref/grad_error_bf16_autocast.pb"))
      << model << ": no PyTorch bf16-autocast gradient error (test/data/make_fixtures.py writes it)";
  Tensor torch = loadRef(model, "grad_error_bf16_autocast.pb");
  plan::Plan p = compileFixturePlan(model, "bf16");
  auto [ge, gf] = firstStepGradients(p, model);
  ASSERT_FALSE(ge.empty());
  const GradientError ours = gradientError(ge, gf, p);
  std::printf("%s emulated bf16 gradients vs fp32: mean relative error megac %.3g, PyTorch autocast %.3g; sign "
              "flips megac %.3g, PyTorch %.3g\n",
              model.c_str(), ours.meanRelative, torch.getAsDouble(0), ours.flipFraction, torch.getAsDouble(1));
  EXPECT_GT(ours.meanRelative, 1e-4) << model << ": no bf16 rounding seen";
  EXPECT_LE(ours.meanRelative, torch.getAsDouble(0)) << model;
  EXPECT_LE(ours.flipFraction, torch.getAsDouble(1)) << model;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EmulatedBf16, ::testing::ValuesIn(kFixtures));

// tf32 operands alone (rounded to nearest; no GPU) move the first step's
// gradients by the size the GPU test tolerates in its tf32 mode (1e-3, 2e-3
// for llama_small and gpt2): that bound is the arithmetic's, not a kernel's.
class EmulatedTf32 : public ::testing::TestWithParam<const char *> {};

TEST_P(EmulatedTf32, GradientsWithinTheGpuTestsTf32Bound) {
  const std::string model = GetParam();
  const bool loose = model == "llama_small" || model.rfind("gpt2", 0) == 0;
  plan::Plan p = compileFixturePlan(model, "tf32");
  auto [ge, gf] = firstStepGradients(p, model);
  ASSERT_FALSE(ge.empty());
  double worst = 0;
  std::string worstName;
  for (const plan::Parameter &pp : p.parameters())
    if (double rel = paramError(ge, gf, pp); rel > worst) worst = rel, worstName = pp.name();
  std::printf("%s emulated tf32: worst first-step gradient %s %.3g relative\n", model.c_str(), worstName.c_str(), worst);
  EXPECT_GT(worst, 1e-5) << model << ": no tf32 rounding seen";
  EXPECT_LE(worst, loose ? 2e-3 : 1e-3) << model;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EmulatedTf32, ::testing::ValuesIn(kFixtures));

} // namespace
