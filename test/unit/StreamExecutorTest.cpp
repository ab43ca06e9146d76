// The CPU stream executor (runtime/stream/StreamExecutor.h): a step through
// the plan's schedule gives the direct CPU path's numbers bit for bit, under
// every seed (every legal interleaving of the streams), on every fixture and
// schedule shape; and the stream simulator (StreamSimulator.h) keeps each
// stream's order and every wait while different seeds interleave differently.
#include "TrainRuns.h"

#include "codegen/GpuAdamwPolicy.h"
#include "runtime/plan/StreamLayout.h"
#include "runtime/stream/StreamSimulator.h"

#include <climits>
#include <cstring>
#include <set>

using namespace megac;
using namespace megac::testing;

namespace {

using RunResult = TrainRun;

// `steps` optimizer steps on the fixture's reference batch (`microBatches`
// a step, fixtureMicroBatches), then the loss of its first micro-batch.
RunResult train(const plan::Plan &p, const std::string &model, const runtime::CpuOptions &o, int steps,
                int microBatches = 1) {
  const std::vector<std::pair<Tensor, Tensor>> mbs = fixtureMicroBatches(model, p.ignore_index(), 1);
  double eval = 0;
  bool evaluated = false;
  RunResult r = trainRun(p, model, o, steps, microBatches, [&](runtime::Trainer &t, int s) {
    if (s < 0) EXPECT_EQ(t.runsSchedule(), o.streamSchedule) << "the CPU backend did not take the path asked for";
    if (s != steps - 1) return;
    auto l = t.evalLoss(mbs[0].first, mbs[0].second);
    if (!l) ADD_FAILURE() << llvm::toString(l.takeError());
    else eval = *l, evaluated = true;
  });
  if (evaluated) r.losses.push_back(eval);
  return r;
}

void expectIdentical(const RunResult &direct, const RunResult &streamed, const std::string &what) {
  ASSERT_EQ(streamed.losses.size(), direct.losses.size()) << what;
  for (size_t i = 0; i < direct.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&streamed.losses[i], &direct.losses[i], sizeof(double)), 0)
        << what << ": loss " << i << " " << streamed.losses[i] << " vs " << direct.losses[i];
  EXPECT_TRUE(sameBits(streamed.state.params, direct.state.params)) << what << ": weights differ";
  EXPECT_TRUE(sameBits(streamed.state.m, direct.state.m)) << what << ": AdamW m differs";
  EXPECT_TRUE(sameBits(streamed.state.v, direct.state.v)) << what << ": AdamW v differs";
  EXPECT_EQ(streamed.state.step, direct.state.step) << what;
}

runtime::CpuOptions direct() {
  runtime::CpuOptions o;
  o.streamSchedule = false;
  return o;
}

runtime::CpuOptions streamed(uint64_t seed) {
  runtime::CpuOptions o;
  o.streamSeed = seed;
  o.checkReads = true;
  return o;
}

class StreamExecutor : public ::testing::TestWithParam<const char *> {};

// Streamed units, resident ones (their AdamW in the RESIDENT region), kept
// activations (SAVED regions), streamed units whose AdamW runs on the GPU
// (their moments in MOMENT_SLOTs), --clip and two micro-batches (gradients
// summed on the host, AdamW after the step): 3 steps and an evaluation each,
// the direct path against the executor under three seeds.
TEST_P(StreamExecutor, BitIdenticalToTheDirectPathUnderEverySeed) {
  const std::string model = GetParam();
  struct Variant {
    const char *name;
    codegen::Recompute recompute;
    int resident;
    float clip;
    int microBatches;
    int gpuAdamw; // at most this many (the fixture's candidates)
    bool overlap = true;
  };
  const Variant variants[] = {{"streamed", codegen::Recompute::All, 0, 0, 1, 0},
                              {"2 resident units", codegen::Recompute::All, 2, 0, 1, 0},
                              {"kept activations", codegen::Recompute::None, 0, 0, 1, 0},
                              {"2 streamed units' AdamW on the GPU", codegen::Recompute::All, 0, 0, 1, 2},
                              {"--clip 0.5, 2 micro-batches, 1 resident", codegen::Recompute::All, 1, 0.5f, 2, 0},
                              {"--clip 0.5, 2 micro-batches, 1 AdamW on the GPU", codegen::Recompute::All, 0, 0.5f, 2, 1},
                              {"2 micro-batches in 2 passes, the last stepping each parameter as its sum completes",
                               codegen::Recompute::All, 0, 0, 2, 0},
                              {"steps apart (--overlap-steps off)", codegen::Recompute::All, 0, 0, 1, 0, false},
                              {"steps apart, 1 resident, 1 AdamW on the GPU", codegen::Recompute::All, 1, 0, 1, 1, false}};
  for (const Variant &v : variants) {
    plan::Plan p = compileFixturePlan(model, "fp32", v.recompute, 16, v.resident, v.clip, 0, v.overlap);
    ASSERT_TRUE(p.has_schedule()) << model;
    if (v.gpuAdamw > 0) {
      const int n = std::min(v.gpuAdamw, int(codegen::gpuAdamwCandidates(p).size()));
      ASSERT_GT(n, 0) << model << ": no unit can run its AdamW on the GPU";
      p = compileFixturePlan(model, "fp32", v.recompute, 16, v.resident, v.clip, n, v.overlap);
      ASSERT_TRUE(plan::anyAdamwOnGpu(p)) << model << " " << v.name;
    }
    EXPECT_EQ(p.schedule().overlap_steps(), v.overlap && v.clip == 0) << model << " " << v.name;
    RunResult want = train(p, model, direct(), 3, v.microBatches);
    ASSERT_EQ(want.losses.size(), 4u) << model << " " << v.name;
    for (uint64_t seed : {0, 1, 2}) {
      RunResult got = train(p, model, streamed(seed), 3, v.microBatches);
      expectIdentical(want, got, model + ", " + v.name + ", seed " + std::to_string(seed));
    }
  }
}

// Layer-major accumulation (StreamSchedule.micro_batches): a pass carries
// its micro-batches through every unit, the grad slot summing their
// gradients in micro-batch order, as the direct path's host array sums them
// over passes. Bit for bit with one pass where no parameter is tied; else
// the sums meet in another order (the passes' sums on the host; a tied
// weight's units' sums, gpt2's embedding and head): close (AdamW's
// normalization magnifies the last bits of a bias's small gradients).
// Also: the units stream in once a pass, and evaluation runs in passes.
TEST_P(StreamExecutor, LayerMajorAccumulationMatchesTheDirectPath) {
  const std::string model = GetParam();
  struct Variant {
    const char *name;
    int accum, perPass;
    float clip;
    int resident, gpuAdamw;
    codegen::Recompute recompute;
  };
  const Variant variants[] = {
      {"2 micro-batches in one pass", 2, 2, 0, 0, 0, codegen::Recompute::All},
      {"4 micro-batches in two passes of 2", 4, 2, 0, 0, 0, codegen::Recompute::All},
      {"4 micro-batches in one pass, --clip 0.5", 4, 4, 0.5f, 0, 0, codegen::Recompute::All},
      {"3 in one pass, 1 resident unit, kept activations", 3, 3, 0, 1, 0, codegen::Recompute::None},
      {"2 in one pass, 1 streamed unit's AdamW on the GPU", 2, 2, 0, 0, 1, codegen::Recompute::All},
  };
  for (const Variant &v : variants) {
    const std::string what = model + ", " + v.name;
    plan::Plan p = compileFixturePlan(model, "fp32", v.recompute, 16, v.resident, v.clip, 0, true, v.accum, v.perPass);
    ASSERT_TRUE(p.has_schedule()) << what;
    if (v.gpuAdamw > 0) {
      const int n = std::min(v.gpuAdamw, int(codegen::gpuAdamwCandidates(p).size()));
      if (n == 0) continue; // gpt2: every unit shares the tied weight or is resident
      p = compileFixturePlan(model, "fp32", v.recompute, 16, v.resident, v.clip, n, true, v.accum, v.perPass);
      ASSERT_TRUE(plan::anyAdamwOnGpu(p)) << what;
    }
    ASSERT_EQ(plan::passMicroBatches(p.schedule()), v.perPass) << what;
    EXPECT_EQ(p.schedule().overlap_steps(), v.clip == 0 && v.accum == v.perPass) << what;
    int prefetches = 0, forwards = 0;
    for (const plan::StreamAction &a : p.schedule().actions()) {
      prefetches += a.kind() == plan::StreamAction::PREFETCH && a.unit() == 1;
      forwards += a.kind() == plan::StreamAction::FORWARD && a.unit() == 1;
    }
    EXPECT_LE(prefetches, 2) << what << ": a unit streams in at most twice a pass (forward, backward)";
    EXPECT_EQ(forwards, v.perPass) << what;
    RunResult want = train(p, model, direct(), 3, v.accum);
    ASSERT_EQ(want.losses.size(), 4u) << what;
    bool exact = v.perPass == v.accum;
    for (const plan::Parameter &q : p.parameters()) exact &= q.units_size() == 1;
    for (uint64_t seed : {0, 1}) {
      RunResult got = train(p, model, streamed(seed), 3, v.accum);
      const std::string run = what + ", seed " + std::to_string(seed);
      if (exact) {
        expectIdentical(want, got, run);
        continue;
      }
      ASSERT_EQ(got.losses.size(), want.losses.size()) << run;
      for (size_t i = 0; i < want.losses.size(); ++i) EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5) << run << ": loss " << i;
      for (const plan::Parameter &q : p.parameters())
        EXPECT_LT(paramError(got.state.params, want.state.params, q), 1e-4) << run << ": " << q.name();
    }
  }
}

// Checkpoint offload (StreamSchedule.pinned_checkpoint_bytes): every unit's
// checkpoint that can leave the GPU goes to the host after its forward and
// comes back before its backward; the numbers are the same plan's without
// the offload, bit for bit, beside resident units, kept activations, GPU
// AdamW and layer-major accumulation, and evaluation (forward only: no
// copies) still runs.
TEST_P(StreamExecutor, OffloadedCheckpointsGiveTheDirectPathsNumbers) {
  const std::string model = GetParam();
  struct Variant {
    const char *name;
    codegen::Recompute recompute;
    int resident, gpuAdamw, accum, perPass;
  };
  const Variant variants[] = {
      {"every unit streamed", codegen::Recompute::All, 0, 0, 1, 1},
      {"1 resident unit, kept activations", codegen::Recompute::None, 1, 0, 1, 1},
      {"1 streamed unit's AdamW on the GPU", codegen::Recompute::All, 0, 1, 1, 1},
      {"2 micro-batches in one pass", codegen::Recompute::All, 0, 0, 2, 2},
      // The head's input of micro-batch 0 is read by the pass's first BACKWARD: it stays.
      {"4 micro-batches in one pass", codegen::Recompute::All, 0, 0, 4, 4},
  };
  for (const Variant &v : variants) {
    const std::string what = model + ", " + v.name;
    plan::Plan p = compileFixturePlan(model, "fp32", v.recompute, 16, v.resident, 0, 0, true, v.accum, v.perPass, INT_MAX);
    ASSERT_TRUE(p.has_schedule()) << what;
    if (v.gpuAdamw > 0) {
      const int n = std::min(v.gpuAdamw, int(codegen::gpuAdamwCandidates(p).size()));
      if (n == 0) continue; // gpt2: every unit shares the tied weight or is resident
      p = compileFixturePlan(model, "fp32", v.recompute, 16, v.resident, 0, n, true, v.accum, v.perPass, INT_MAX);
    }
    int saves = 0, loads = 0;
    for (const plan::StreamAction &a : p.schedule().actions()) {
      saves += a.kind() == plan::StreamAction::SAVE_CHECKPOINT;
      loads += a.kind() == plan::StreamAction::LOAD_CHECKPOINT;
    }
    ASSERT_GT(saves, 0) << what << ": nothing offloaded";
    EXPECT_EQ(saves, loads) << what;
    EXPECT_GT(p.schedule().pinned_checkpoint_bytes(), 0) << what;
    // The same plan without the offload, through the executor (which the
    // tests above hold to the direct path).
    plan::Plan kept = compileFixturePlan(model, "fp32", v.recompute, 16, v.resident, 0, plan::anyAdamwOnGpu(p) ? v.gpuAdamw : 0, true,
                                         v.accum, v.perPass, 0);
    ASSERT_EQ(kept.schedule().pinned_checkpoint_bytes(), 0) << what;
    RunResult want = train(kept, model, streamed(7), 3, v.accum);
    ASSERT_EQ(want.losses.size(), 4u) << what;
    for (uint64_t seed : {0, 1, 2})
      expectIdentical(want, train(p, model, streamed(seed), 3, v.accum), what + ", seed " + std::to_string(seed));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StreamExecutor,
                         ::testing::Values("llama", "llama_noopt", "llama_sdpa", "llama_op23", "gpt2", "gpt2_noopt",
                                           "llama_small"));

// The order the simulator runs the actions in: each stream's actions in issue
// order, each wait after the record it refers to, and other seeds other orders.
TEST(StreamSimulator, KeepsStreamOrderAndWaitsAndVariesWithTheSeed) {
  plan::Plan p = compileFixturePlan("llama", "fp32", codegen::Recompute::All, 16, 0);
  const plan::StreamSchedule &s = p.schedule();
  std::vector<int> all;
  for (int i = 0; i < s.actions_size(); ++i) all.push_back(i);
  std::set<std::vector<int>> orders;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    std::vector<int> trace;
    auto e = stream::simulateStreams(s, all, seed, [](int) { return llvm::Error::success(); }, &trace);
    ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
    ASSERT_EQ(trace.size(), all.size());
    std::vector<int> ranAt(all.size(), -1);
    for (size_t k = 0; k < trace.size(); ++k) ranAt[size_t(trace[k])] = int(k);
    for (int i = 0; i < s.actions_size(); ++i) {
      const plan::StreamAction &a = s.actions(i);
      // Stream order.
      for (int j = 0; j < i; ++j)
        if (s.actions(j).stream() == a.stream()) EXPECT_LT(ranAt[size_t(j)], ranAt[size_t(i)]) << "seed " << seed;
      // Each wait: the latest record issued before i ran before i.
      for (int32_t w : a.waits())
        for (int j = i - 1; j >= 0; --j) {
          const auto &r = s.actions(j).records();
          if (std::find(r.begin(), r.end(), w) == r.end()) continue;
          EXPECT_LT(ranAt[size_t(j)], ranAt[size_t(i)]) << "seed " << seed << ": action " << i << " waits " << s.events(w);
          break;
        }
    }
    orders.insert(trace);
  }
  EXPECT_GE(orders.size(), 4u) << "16 seeds gave only " << orders.size() << " interleavings";
}

// Waits refer to records issued before the waiting action (as CUDA's do), so
// a wait for an event no earlier action records waits for nothing; and an
// action's error stops the run there.
TEST(StreamSimulator, WaitsReferToEarlierRecordsAndErrorsStop) {
  plan::Plan p = compileFixturePlan("llama", "fp32", codegen::Recompute::All, 16, 0);
  plan::StreamSchedule &s = *p.mutable_schedule();
  int w0free = -1;
  for (int e = 0; e < s.events_size(); ++e)
    if (s.events(e) == "w0.free") w0free = e;
  ASSERT_GE(w0free, 0);
  std::vector<int> all;
  for (int i = 0; i < s.actions_size(); ++i) all.push_back(i);
  s.mutable_actions(0)->add_waits(w0free); // the first PREFETCH: w0.free is recorded only later
  std::vector<int> trace;
  auto ok = stream::simulateStreams(s, all, 3, [](int) { return llvm::Error::success(); }, &trace);
  EXPECT_FALSE(bool(ok)) << llvm::toString(std::move(ok));
  EXPECT_EQ(trace.size(), all.size());
  std::vector<int> ran;
  auto e = stream::simulateStreams(s, all, 0, [&](int i) {
    ran.push_back(i);
    return i == 5 ? llvm::createStringError(llvm::inconvertibleErrorCode(), "boom at 5") : llvm::Error::success();
  });
  ASSERT_TRUE(bool(e));
  EXPECT_EQ(llvm::toString(std::move(e)), "boom at 5");
  EXPECT_EQ(ran.back(), 5);
}

} // namespace
