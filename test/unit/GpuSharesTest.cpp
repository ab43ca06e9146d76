// Several GPUs of one host (plan.proto's Plan.gpus; runtime/train/GpuShares.h):
// each GPU runs its share of the step's micro-batches through the plan's
// schedule and the host adds their gradients to the step's sum as they land,
// GPU by GPU, then steps. The CPU backend runs the shares one after another,
// each through the stream executor's simulated device with every read
// checked. What it must equal: one GPU running all the micro-batches with
// --grad-accum in passes of as many, bit for bit (the same additions in the
// same order), tied weights, several passes a GPU and --clip included.
#include "GpuFaultStep.h"
#include "TrainRuns.h"

#include "driver/Compile.h"
#include "runtime/plan/HostBill.h"
#include "runtime/plan/PlanChecker.h"
#include "runtime/plan/StreamLayout.h"

using namespace megac;
using namespace megac::testing;

namespace {

plan::Plan planFor(const std::string &model, int gpus, int accum, int perPass, float clip = 0) {
  codegen::CodegenOptions co;
  co.compute = "fp32";
  co.schedule.gpus = gpus;
  co.schedule.microBatches = perPass;
  plan::Optimizer &o = co.optimizer;
  o.set_clip(clip);
  o.set_lr(1e-2f);
  o.set_beta2(0.95f);
  o.set_weight_decay(0.1f);
  o.set_grad_accum(accum);
  return compileFixtureWith(model, 16, co);
}

TEST(GpuShares, EqualOneGpuAccumulatingEveryMicroBatch) {
  for (const char *model : {"llama", "gpt2"}) {
    struct Case {
      int gpus, accum, perPass; // the several-GPU plan: accum micro-batches a
                                // GPU, perPass a pass
      float clip;
    };
    for (const Case c : {Case{2, 1, 1, 0}, Case{4, 1, 1, 0}, Case{2, 2, 2, 0}, Case{2, 2, 1, 0}, Case{2, 1, 1, 1.0f}}) {
      const std::string what = std::string(model) + ", " + std::to_string(c.gpus) + " GPUs x " +
                               std::to_string(c.accum) + " micro-batches (" + std::to_string(c.perPass) + " a pass)" +
                               (c.clip > 0 ? ", clip" : "");
      const plan::Plan several = planFor(model, c.gpus, c.accum, c.perPass, c.clip);
      const plan::Plan one = planFor(model, 1, c.gpus * c.accum, c.perPass, c.clip);
      ASSERT_EQ(several.gpus(), c.gpus) << what;
      EXPECT_EQ(plan::planGpus(one), 1) << what;
      EXPECT_FALSE(several.schedule().overlap_steps()) << what << ": the host sums every GPU's gradients first";
      for (const plan::Unit &u : several.units())
        EXPECT_FALSE(u.resident() || u.adamw_on_gpu()) << what << " " << u.name();
      const int mbs = c.gpus * c.accum;
      for (uint64_t seed : {1u, 2u}) {
        const TrainRun want = trainRun(one, model, streamedOptions(seed), 3, mbs);
        expectSameRun(want, trainRun(several, model, streamedOptions(seed), 3, mbs),
                      what + ", seed " + std::to_string(seed));
        EXPECT_GT(want.losses.front(), want.losses.back()) << what << ": it trains";
      }
      // The direct CPU path, a pass a micro-batch, runs the shares the same
      // way.
      runtime::CpuOptions direct;
      direct.streamSchedule = false;
      expectSameRun(trainRun(one, model, direct, 2, mbs), trainRun(several, model, direct, 2, mbs),
                    what + ", direct path");
    }
  }
}

TEST(GpuShares, PlanCheckerAndCompileRefuseUnitsThatSkipTheHostSum) {
  plan::Plan p = planFor("llama", 2, 1, 1);
  ASSERT_FALSE(llvm::errorToBool(plan::checkPlan(p)));
  for (int mutation = 0; mutation < 3; ++mutation) {
    plan::Plan bad = p;
    if (mutation == 0)
      bad.mutable_units(0)->set_resident(true);
    if (mutation == 1)
      bad.mutable_units(1)->set_adamw_on_gpu(true);
    if (mutation == 2)
      bad.set_gpus(65);
    auto e = plan::checkPlan(bad);
    ASSERT_TRUE(bool(e)) << mutation;
    const std::string msg = llvm::toString(std::move(e));
    EXPECT_NE(msg.find(mutation == 2 ? "65 GPUs" : "GPUs, whose host sums every unit's gradients"), std::string::npos)
        << msg;
  }
  // Given by hand, a unit kept off the host's sum is an error at compile.
  codegen::CodegenOptions co;
  co.schedule.gpus = 2;
  co.schedule.residentUnits = 2;
  frontend::ImportOptions io;
  io.batch = 2;
  io.seq = 16;
  auto r = driver::compileForTraining(fixtureDir("llama") + "/model.onnx", io, {}, co);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("--resident-units 2 with --gpus 2"), std::string::npos);
  co.schedule.residentUnits = -1;
  co.schedule.gpuAdamwUnits = 1;
  r = driver::compileForTraining(fixtureDir("llama") + "/model.onnx", io, {}, co);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("--gpu-adamw-units 1 with --gpus 2"), std::string::npos);
  // auto for both: none.
  co.schedule.gpuAdamwUnits = -1;
  r = driver::compileForTraining(fixtureDir("llama") + "/model.onnx", io, {}, co);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  for (const plan::Unit &u : r->units())
    EXPECT_FALSE(u.resident() || u.adamw_on_gpu()) << u.name();
  // The host bill: the step's gradients, which every GPU's add to.
  auto bill = plan::hostBill(*r);
  ASSERT_TRUE(bool(bill)) << llvm::toString(bill.takeError());
  EXPECT_EQ(bill->gradients, 4 * r->total_parameters());
}

// A GPU that fails mid-step (MEGAC_INJECT_GPU_FAULT=GPU@STEP) stops the step
// with an error naming it, before any update (GpuFaultStep.h).
TEST(GpuShares, AFailingGpuStopsTheStepBeforeAnyUpdate) {
  const plan::Plan p = planFor("llama", 2, 1, 1);
  expectGpuFaultStopsTheStep(
      p, "llama", [&] { return runtime::Trainer::create(p, streamedOptions(3)); },
      trainRun(p, "llama", streamedOptions(3), 2, 2));
}

} // namespace
