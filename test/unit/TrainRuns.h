#pragma once
// Training runs on the CPU backend compared bit for bit: the CPU stream
// executor's tests of schedule variants (update order, grad slot sizes,
// weights streamed as bf16) train each plan and compare losses and state.
#include "FixtureTestUtil.h"

#include <cstring>
#include <functional>

namespace megac::testing {

struct TrainRun {
  std::vector<double> losses;
  runtime::HostState state;
};

// The CPU stream executor, reads checked, under interleaving `seed`.
inline runtime::CpuOptions streamedOptions(uint64_t seed) {
  runtime::CpuOptions o;
  o.streamSchedule = true;
  o.streamSeed = seed;
  o.checkReads = true;
  return o;
}

// `steps` steps of the fixture's reference batch (`microBatches` a step) at
// lr 1e-2 on trainer `t` (any backend, its plan's weights loaded);
// `hook(trainer, -1)` runs before the first step and `hook(trainer, s)`
// after step s.
inline TrainRun trainRunOn(std::unique_ptr<runtime::Trainer> t, const std::string &model, int steps = 3,
                           int microBatches = 1, const std::function<void(runtime::Trainer &, int)> &hook = {}) {
  TrainRun r;
  if (!t) {
    ADD_FAILURE() << "no trainer";
    return r;
  }
  if (hook) hook(*t, -1);
  const auto mbs = fixtureMicroBatches(model, t->plan().ignore_index(), microBatches);
  for (int s = 0; s < steps; ++s) {
    auto st = t->step(mbs, 1e-2f);
    if (!st) {
      ADD_FAILURE() << llvm::toString(st.takeError());
      return r;
    }
    r.losses.push_back(st->loss);
    if (hook) hook(*t, s);
  }
  r.state = t->currentState();
  return r;
}

// The same on the CPU backend with options `o`, from the plan's initial weights.
inline TrainRun trainRun(const plan::Plan &p, const std::string &model, const runtime::CpuOptions &o, int steps = 3,
                         int microBatches = 1, const std::function<void(runtime::Trainer &, int)> &hook = {}) {
  return trainRunOn(withWeights(runtime::Trainer::create(p, o), p), model, steps, microBatches, hook);
}

inline bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The same losses and weights and AdamW moments, bit for bit.
inline void expectSameRun(const TrainRun &want, const TrainRun &got, const std::string &what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i) EXPECT_EQ(got.losses[i], want.losses[i]) << what << ": loss " << i;
  EXPECT_TRUE(sameBits(got.state.params, want.state.params)) << what << ": weights";
  EXPECT_TRUE(sameBits(got.state.m, want.state.m)) << what << ": AdamW m";
  EXPECT_TRUE(sameBits(got.state.v, want.state.v)) << what << ": AdamW v";
}

} // namespace megac::testing
