#pragma once
// Instruction tuning: a step over micro-batches that count different numbers
// of targets (the rest the ignore index) has the loss and gradient of the
// mean over every counted target of the step, as PyTorch's reference
// (test/data/hf_tiny/make_sft_reference.py) computes them. One check for
// both backends (TokenWeightedStepTest.cpp, test/gpu/GpuTrainTest.cpp).
#include "FixtureTestUtil.h"

#include "driver/Compile.h"
#include "frontend/TensorProto.h"
#include "runtime/train/Weights.h"
#include "runtime/weights/WeightFiles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

namespace megac::testing {

inline Tensor readSftRef(const std::string &name) {
  auto t = frontend::readTensorFile(fixtureDir("hf_tiny/llama/ref_sft") + "/" + name);
  if (!t) {
    ADD_FAILURE() << llvm::toString(t.takeError());
    return Tensor(DType::F32, {1});
  }
  return *t;
}

inline double relativeL2(const std::vector<double> &got, const float *want, int64_t n) {
  double d = 0, w = 0;
  for (int64_t i = 0; i < n; ++i) {
    d += (got[size_t(i)] - want[i]) * (got[size_t(i)] - want[i]);
    w += double(want[i]) * want[i];
  }
  return std::sqrt(d / std::max(w, 1e-300));
}

using TrainerFactory = std::function<llvm::Expected<std::unique_ptr<runtime::Trainer>>(const plan::Plan &)>;

// Two micro-batches counting 27 and 10 targets: the step's loss and its
// gradient (read back from the update) against PyTorch's, within `tol`.
inline void checkTokenWeightedStep(const TrainerFactory &makeTrainer, double tol) {
  // AdamW with betas 0 and eps 1 at lr 1, no decay: one step moves each
  // weight by -g / (|g| + 1), from which the step's gradient g is read back.
  frontend::ImportOptions io;
  io.batch = 2;
  io.seq = 16;
  codegen::CodegenOptions co;
  co.compute = "fp32"; // the GPU's products in fp32, as the CPU backend computes
  plan::Optimizer &o = co.optimizer;
  o.set_lr(1.0f);
  o.set_beta1(0.0f);
  o.set_beta2(0.0f);
  o.set_eps(1.0f);
  o.set_weight_decay(0.0f);
  o.set_schedule("constant");
  o.set_grad_accum(2);
  auto plan = driver::compileForTraining(fixtureDir("hf_tiny/llama") + "/model.onnx", io, {}, co);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  auto trainer = makeTrainer(*plan);
  ASSERT_TRUE(bool(trainer)) << llvm::toString(trainer.takeError());
  runtime::WeightOptions wo;
  wo.weightsPath = fixtureDir("hf_tiny/llama/f32");
  auto loaded = runtime::loadInitialWeights(*plan, (*trainer)->state(), wo, runtime::fileWeightReaders());
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  const std::vector<float> before = (*trainer)->state().params;

  std::vector<std::pair<Tensor, Tensor>> mbs = {{readSftRef("mb0_input_ids.pb"), readSftRef("mb0_targets.pb")},
                                                {readSftRef("mb1_input_ids.pb"), readSftRef("mb1_targets.pb")}};
  auto weights = runtime::microBatchWeights(mbs, plan->ignore_index());
  ASSERT_TRUE(bool(weights));
  EXPECT_FLOAT_EQ((*weights)[0], 27.0f / 37.0f);
  EXPECT_FLOAT_EQ((*weights)[1], 10.0f / 37.0f);
  auto stats = (*trainer)->step(mbs, 1.0f);
  ASSERT_TRUE(bool(stats)) << llvm::toString(stats.takeError());
  const double refLoss = readSftRef("loss.pb").getAsDouble(0);
  EXPECT_NEAR(stats->loss, refLoss, tol * refLoss);

  const std::vector<float> &after = (*trainer)->state().params;
  for (const plan::Parameter &p : plan->parameters()) {
    std::string hf = p.name().substr(2); // the export's wrapper prefix "m."
    Tensor want = readSftRef("grad/" + hf + ".pb");
    ASSERT_EQ(want.numel(), p.numel()) << hf;
    std::vector<double> g(size_t(p.numel()));
    for (int64_t i = 0; i < p.numel(); ++i) {
      double delta = double(after[size_t(p.host_offset() + i)]) - double(before[size_t(p.host_offset() + i)]);
      g[size_t(i)] = -delta / (1.0 - std::fabs(delta));
    }
    EXPECT_LT(relativeL2(g, want.data<float>(), p.numel()), tol) << hf;
  }
}

} // namespace megac::testing
