#pragma once
// A GPU of a several-GPU plan failing mid-step (MEGAC_INJECT_GPU_FAULT,
// runtime/train/GpuShares.h), checked on any backend: the step fails naming
// the GPU, before any update (the host state is step 1's), and the next
// step runs as step 2 again, as a run that never failed would.
#include "TrainRuns.h"

#include <cstdlib>

namespace megac::testing {

// `make` builds the backend's trainer for `p` (a plan for 2 GPUs, one
// micro-batch each); `want`: that run's 2 steps without the fault.
inline void expectGpuFaultStopsTheStep(const plan::Plan &p, const std::string &model,
                                       const std::function<llvm::Expected<std::unique_ptr<runtime::Trainer>>()> &make,
                                       const TrainRun &want) {
  const auto mbs = fixtureMicroBatches(model, p.ignore_index(), 2);
  ::setenv("MEGAC_INJECT_GPU_FAULT", "1@2", 1);
  auto t = withWeights(make(), p);
  ::unsetenv("MEGAC_INJECT_GPU_FAULT");
  ASSERT_TRUE(t);
  ASSERT_TRUE(bool(t->step(mbs, 1e-2f)));
  const runtime::HostState before = t->currentState();
  auto failed = t->step(mbs, 1e-2f);
  ASSERT_FALSE(bool(failed));
  EXPECT_NE(llvm::toString(failed.takeError()).find("GPU 1 of 2: injected fault at step 2"), std::string::npos);
  const runtime::HostState &after = t->currentState();
  EXPECT_EQ(after.step, 1);
  EXPECT_TRUE(sameBits(after.params, before.params) && sameBits(after.m, before.m) && sameBits(after.v, before.v));
  auto again = t->step(mbs, 1e-2f); // the fault was step 2's, once
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  ASSERT_EQ(want.losses.size(), 2u);
  EXPECT_EQ(again->loss, want.losses[1]);
  EXPECT_TRUE(sameBits(t->currentState().params, want.state.params));
}

} // namespace megac::testing
