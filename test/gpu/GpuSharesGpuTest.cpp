// A plan for several GPUs (runtime/train/GpuShares.h) on the CUDA runtime,
// which runs the GPUs' shares one after another on its one GPU: the host's
// sum of their gradients trains as one GPU accumulating every micro-batch,
// bit for bit (fp32; gpt2's tied weights too), and a GPU failing mid-step
// leaves the host state as the last step left it.
#include "../unit/GpuFaultStep.h"
#include "../unit/TrainRuns.h"
#include "GpuTrainerUtil.h"
#include "runtime/plan/StreamLayout.h"

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
      runs[several] = trainRunOn(gpuTrainer(p), model, 3, 2);
    }
    expectSameRun(runs[0], runs[1], "2 GPUs' shares against --grad-accum 2");
  }
}

TEST(GpuShares, AFailingGpuStopsTheStepBeforeAnyUpdate) {
  const plan::Plan p = sharesPlan(2, 1);
  const TrainRun want = trainRunOn(gpuTrainer(p), "llama", 2, 2); // the same 2 steps without the fault
  expectGpuFaultStopsTheStep(p, "llama", [&] { return quietCudaTrainer(p); }, want);
}

} // namespace
