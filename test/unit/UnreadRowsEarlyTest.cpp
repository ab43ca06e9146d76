// The rows of a token-indexed table (an untied embedding) that no token of the
// step reads, stepped by the host's AdamW right after the forward's PREFETCH
// has copied the table (StreamAction.UPDATE_UNREAD_ROWS, runtime/plan/TokenRows.h),
// and the rest by the unit's UPDATE after the backward: AdamW of a zero
// gradient needs no gradient, so the two give one UPDATE's numbers of every
// row bit for bit (the CPU stream executor, every read checked, the direct
// path too), in one pass, in several passes of a step, on several GPUs' shares.
#include "TrainRuns.h"

#include "runtime/plan/TokenRows.h"
#include "runtime/train/NonFinite.h"
#include "runtime/train/TokenRowSets.h"

#include <cmath>

using namespace megac;
using namespace megac::testing;

namespace {

plan::Plan planFor(const std::string &model, bool early, int accum = 1, int perPass = 1, int gpus = 1) {
  codegen::CodegenOptions co;
  co.compute = "fp32";
  co.schedule.unreadRowsEarly = early;
  co.schedule.microBatches = perPass;
  co.schedule.gpus = gpus;
  plan::Optimizer &o = co.optimizer;
  o.set_lr(1e-2f);
  o.set_beta2(0.95f);
  o.set_weight_decay(0.1f);
  o.set_grad_accum(accum);
  return compileFixtureWith(model, 16, co);
}

int unreadRowsActions(const plan::Plan &p) {
  int n = 0;
  for (const plan::StreamAction &a : p.schedule().actions()) n += a.kind() == plan::StreamAction::UPDATE_UNREAD_ROWS;
  return n;
}

TEST(TokenRows, OnlyAnUntiedEmbeddingIsTokenIndexed) {
  const plan::Plan llama = planFor("llama", true);
  std::vector<std::string> tables;
  for (int q = 0; q < llama.parameters_size(); ++q)
    if (plan::readOnlyByTokenGather(llama, q)) tables.push_back(llama.parameters(q).name());
  EXPECT_EQ(tables, std::vector<std::string>{"m.model.embed_tokens.weight"});
  EXPECT_EQ(unreadRowsActions(llama), 1);
  // gpt2: its token table is tied to the head, its position table is read by the positions.
  const plan::Plan gpt2 = planFor("gpt2", true);
  for (int q = 0; q < gpt2.parameters_size(); ++q) EXPECT_FALSE(plan::readOnlyByTokenGather(gpt2, q)) << gpt2.parameters(q).name();
  EXPECT_EQ(unreadRowsActions(gpt2), 0);
  EXPECT_EQ(unreadRowsActions(planFor("llama", false)), 0);
}

TEST(TokenRows, TheRowsTheTokensRead) {
  const plan::Plan p = planFor("llama", true);
  const std::vector<int32_t> params = runtime::earlyRowParameters(p);
  ASSERT_EQ(params.size(), 1u);
  const int64_t rows = plan::parameterRows(p.parameters(params[0]));
  ASSERT_EQ(rows, 256);
  // Two micro-batches: rows 3, 4, 5 and 7; -1 counts from the end (255); 256 and -300 read nothing.
  Tensor a = Tensor::fromVector(DType::I64, {1, 4}, std::vector<int64_t>{5, 3, 4, -1});
  Tensor b = Tensor::fromVector(DType::I64, {1, 4}, std::vector<int64_t>{7, 256, -300, 3});
  auto read = runtime::stepTokenRows(p, params, {{a, a}, {b, b}});
  const std::vector<runtime::RowRun> *r = read->readOf(params[0]);
  ASSERT_TRUE(r);
  std::vector<std::pair<int64_t, int64_t>> got;
  for (const runtime::RowRun &x : *r) got.push_back({x.begin, x.end});
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{{3, 6}, {7, 8}, {255, 256}}));
  got.clear();
  for (const runtime::RowRun &x : runtime::unreadRuns(*r, rows)) got.push_back({x.begin, x.end});
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {6, 7}, {8, 255}}));
  EXPECT_EQ(read->readOf(params[0] + 1), nullptr);
  // The cost model's share: 2 x 16 tokens drawn uniformly from 256 rows read
  // 1 - (255/256)^32 of them, less than a row a token.
  EXPECT_NEAR(plan::readRowsShare(p, params[0]), 1.0 - std::pow(255.0 / 256.0, 32.0), 1e-12);
  EXPECT_LT(plan::readRowsShare(p, params[0]), 32.0 / 256.0);
}

// AdamW without a gradient rounds as AdamW of a zero gradient, on every path the CPU has.
TEST(TokenRows, NoGradientIsAZeroGradient) {
  const int64_t n = 1000;
  std::vector<float> p0(n), m0(n), v0(n), zeros(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) p0[i] = 0.01f * float(i % 37) - 0.2f, m0[i] = 1e-3f * float(i % 11) - 5e-3f, v0[i] = 1e-6f * float(i % 7);
  runtime::AdamWHyper h;
  for (runtime::AdamWIsa isa : {runtime::AdamWIsa::Scalar, runtime::AdamWIsa::Avx2, runtime::AdamWIsa::Avx512}) {
    if (!runtime::adamwIsaSupported(isa)) {
      std::printf("skipped: this CPU lacks AdamW path %d\n", int(isa));
      continue;
    }
    std::vector<float> p[2] = {p0, p0}, m[2] = {m0, m0}, v[2] = {v0, v0};
    std::vector<uint16_t> c[2] = {std::vector<uint16_t>(n), std::vector<uint16_t>(n)};
    for (int k = 0; k < 2; ++k)
      runtime::adamwUpdateIsa(isa, p[k].data() + 1, k ? nullptr : zeros.data() + 1, m[k].data() + 1, v[k].data() + 1, n - 1,
                              3, h, true, 0.5f, c[k].data() + 1);
    EXPECT_TRUE(sameBits(p[0], p[1]) && sameBits(m[0], m[1]) && sameBits(v[0], v[1]) && c[0] == c[1]) << int(isa);
    EXPECT_FALSE(sameBits(p[0], p0)) << "the weights decayed";
  }
}

TEST(UnreadRowsEarly, TrainsAsTheWholeTableAfterTheBackwardBitForBit) {
  struct Case {
    int accum, perPass, gpus;
  };
  for (const Case c : {Case{1, 1, 1}, Case{2, 2, 1}, Case{2, 1, 1}, Case{1, 1, 2}}) {
    const std::string what = std::to_string(c.gpus) + " GPU(s) x " + std::to_string(c.accum) + " micro-batches, " +
                             std::to_string(c.perPass) + " a pass";
    const plan::Plan early = planFor("llama", true, c.accum, c.perPass, c.gpus);
    const plan::Plan late = planFor("llama", false, c.accum, c.perPass, c.gpus);
    ASSERT_EQ(unreadRowsActions(early), 1) << what;
    const int mbs = c.accum * c.gpus;
    for (uint64_t seed : {1u, 2u}) {
      const TrainRun want = trainRun(late, "llama", streamedOptions(seed), 3, mbs);
      expectSameRun(want, trainRun(early, "llama", streamedOptions(seed), 3, mbs), what + ", seed " + std::to_string(seed));
      EXPECT_GT(want.losses.front(), want.losses.back()) << what << ": it trains";
    }
    // The direct path (every unit's programs in turn, AdamW of every row at once).
    runtime::CpuOptions direct;
    direct.streamSchedule = false;
    expectSameRun(trainRun(late, "llama", direct, 3, mbs), trainRun(early, "llama", streamedOptions(3), 3, mbs),
                  what + ", against the direct path");
  }
}

// A pass run alone (forwardBackwardPass, outside a step) has no step's rows:
// its early action steps nothing and its UPDATE the whole table.
TEST(UnreadRowsEarly, APassRunAloneStepsTheWholeTableAfterTheBackward) {
  const auto mbs = fixtureMicroBatches("llama", -100, 1);
  runtime::HostState states[2];
  for (int early = 0; early < 2; ++early) {
    const plan::Plan p = planFor("llama", early == 1);
    auto t = withWeights(runtime::Trainer::create(p, streamedOptions(1)), p);
    ASSERT_TRUE(t);
    for (int s = 0; s < 2; ++s) {
      auto st = t->step(mbs, 1e-2f); // a step, whose rows the next pass must not reuse
      ASSERT_TRUE(bool(st)) << llvm::toString(st.takeError());
      auto losses = t->forwardBackwardPass({patternBatch(16)}, {1.0f}, nullptr, 1e-2f); // other rows
      ASSERT_TRUE(bool(losses)) << llvm::toString(losses.takeError());
    }
    states[early] = t->currentState();
  }
  EXPECT_TRUE(sameBits(states[0].params, states[1].params) && sameBits(states[0].m, states[1].m) &&
              sameBits(states[0].v, states[1].v));
}

// A NaN found after the early step names it among what the step had applied.
TEST(UnreadRowsEarly, ANonFiniteGradientNamesTheRowsStepped) {
  const plan::Plan p = planFor("llama", true);
  ::setenv("MEGAC_INJECT_NAN", "layer.1", 1);
  auto t = withWeights(runtime::Trainer::create(p, streamedOptions(1)), p);
  ::unsetenv("MEGAC_INJECT_NAN");
  ASSERT_TRUE(t);
  const auto mbs = fixtureMicroBatches("llama", p.ignore_index(), 1);
  auto st = t->step(mbs, 1e-2f);
  ASSERT_FALSE(bool(st));
  const std::string m = llvm::toString(st.takeError());
  EXPECT_NE(m.find("unit 'layer.1' backward"), std::string::npos) << m;
  EXPECT_NE(m.find("the AdamW update of unit 'head' and the rows no token read of unit 'embed' had already been applied"),
            std::string::npos)
      << m;
}

} // namespace
