// A plan for several GPUs (runtime/train/GpuShares.h) on the CUDA runtime,
// which runs the GPUs' shares one after another on its one GPU: the host's
// sum of their gradients trains as one GPU accumulating every micro-batch,
// bit for bit (fp32; gpt2's tied weights too), and a GPU failing mid-step
// leaves the host state as the last step left it.
#include "../unit/TrainRuns.h"
#include "GpuTrainerUtil.h"
#include "runtime/plan/StreamLayout.h"

#include <cstdlib>

using namespace megac;
using namespace megac::testing;

namespace {

plan::Plan sharesPlan(int gpus, int accum, const char *model = "llama") {
  codegen::CodegenOptions co;
  co.compute = "fp32";
  co.schedule.gpus = gpus;
  co.optimizer.set_lr(1e-2f);
  co.optimizer.set_grad_accum(accum);
  return compileFixtureWith(model, 16, co);
}

TEST(GpuShares, TrainAsOneGpuAccumulatingBitForBit) {
  for (const char *model : {"llama", "gpt2"}) {
    SCOPED_TRACE(model);
    TrainRun runs[2];
    for (int several = 0; several < 2; ++several) {
      const plan::Plan p = several ? sharesPlan(2, 1, model) : sharesPlan(1, 2, model);
      ASSERT_EQ(plan::planGpus(p), several ? 2 : 1);
      const auto mbs = fixtureMicroBatches(model, p.ignore_index(), 2);
      auto gpu = gpuTrainer(p);
      ASSERT_TRUE(gpu);
      for (int s = 0; s < 3; ++s) {
        auto st = gpu->step(mbs, 1e-2f);
        ASSERT_TRUE(bool(st)) << llvm::toString(st.takeError());
        runs[several].losses.push_back(st->loss);
      }
      runs[several].state = gpu->currentState();
    }
    expectSameRun(runs[0], runs[1], "2 GPUs' shares against --grad-accum 2");
  }
}

TEST(GpuShares, AFailingGpuStopsTheStepBeforeAnyUpdate) {
  const plan::Plan p = sharesPlan(2, 1);
  const auto mbs = fixtureMicroBatches("llama", p.ignore_index(), 2);
  ::setenv("MEGAC_INJECT_GPU_FAULT", "1@2", 1);
  auto gpu = gpuTrainer(p);
  ::unsetenv("MEGAC_INJECT_GPU_FAULT");
  ASSERT_TRUE(gpu);
  ASSERT_TRUE(bool(gpu->step(mbs, 1e-2f)));
  const runtime::HostState before = gpu->currentState();
  auto failed = gpu->step(mbs, 1e-2f);
  ASSERT_FALSE(bool(failed));
  EXPECT_NE(llvm::toString(failed.takeError()).find("GPU 1 of 2: injected fault at step 2"), std::string::npos);
  const runtime::HostState &after = gpu->currentState();
  EXPECT_EQ(after.step, 1);
  EXPECT_TRUE(sameBits(after.params, before.params) && sameBits(after.m, before.m) && sameBits(after.v, before.v));
  auto again = gpu->step(mbs, 1e-2f);
  EXPECT_TRUE(bool(again)) << llvm::toString(again.takeError());
}

} // namespace
