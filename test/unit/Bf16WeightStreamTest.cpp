// Weights streamed as bf16 (--bf16-weight-stream, plan.proto's
// Parameter.streams_bf16, runtime/plan/Bf16Weights.h): the schedule marks
// exactly the parameters that only matrix products read, of streamed units
// stepped on the host; the plan checker refuses a mark anywhere else; the
// host bill, the report and the cost model count the copies and the halved
// PREFETCHes; the host's AdamW writes each new weight's bf16 rounding (every
// instruction set, ties and NaN included); and the CPU stream executor, its
// reads checked and products rounded to bf16 as on the GPU, trains to the
// same losses and state bit for bit as the plan without it.
#include "TrainRuns.h"

#include "codegen/CostModel.h"
#include "runtime/core/DType.h"
#include "runtime/plan/Bf16Weights.h"
#include "runtime/plan/HostBill.h"
#include "runtime/plan/PlanChecker.h"
#include "runtime/train/AdamW.h"

#include <cstring>
#include <random>

using namespace megac;
using namespace megac::testing;

namespace {

plan::Plan compileStream(const std::string &model, bool stream, int residentUnits = 0, int gpuAdamwUnits = 0,
                         const std::string &compute = "bf16") {
  codegen::CodegenOptions co;
  co.compute = compute;
  co.schedule.residentUnits = residentUnits;
  co.schedule.gpuAdamwUnits = gpuAdamwUnits;
  co.schedule.bf16WeightStream = stream;
  co.schedule.updateOrder = codegen::UpdateOrder::Arrival;
  plan::Optimizer &o = co.optimizer;
  o.set_lr(1e-2f);
  o.set_beta2(0.95f);
  o.set_weight_decay(0.1f);
  return compileFixtureWith(model, 16, co);
}

std::set<std::string> streamed(const plan::Plan &p) {
  std::set<std::string> names;
  for (const plan::Parameter &q : p.parameters())
    if (q.streams_bf16()) names.insert(q.torch_name().empty() ? q.name() : q.torch_name());
  return names;
}

std::string checkError(const plan::Plan &p) {
  llvm::Error e = plan::checkPlan(p);
  return e ? llvm::toString(std::move(e)) : std::string();
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TEST(Bf16WeightStream, MarksTheParametersOnlyProductsRead) {
  plan::Plan p = compileStream("llama", true);
  ASSERT_GT(p.schedule().weight_copy_bytes(), 0) << "the stream implies the weight copies";
  EXPECT_EQ(checkError(p), "");
  // Every projection and the head (the export's transposed matrices); no
  // norm, and not the embedding (a Gather reads it).
  std::set<std::string> want;
  for (const plan::Parameter &q : p.parameters())
    if (q.type().shape_size() == 2 && q.name().find("embed_tokens") == std::string::npos) want.insert(q.name());
  EXPECT_EQ(want.size(), 2u * 7u + 1u);
  EXPECT_EQ(streamed(p), want);
  EXPECT_TRUE(streamed(compileStream("llama", false)).empty());
  EXPECT_TRUE(streamed(compileStream("llama", true, 0, 0, "tf32")).empty()) << "only bf16 plans";
  // A resident unit's weights and a GPU-stepped unit's come in fp32.
  plan::Plan mixed = compileStream("llama", true, /*residentUnits=*/1, /*gpuAdamwUnits=*/1);
  for (const plan::Parameter &q : mixed.parameters())
    for (int32_t u : q.units())
      if (mixed.units(u).resident() || mixed.units(u).adamw_on_gpu()) EXPECT_FALSE(q.streams_bf16()) << q.name();
  EXPECT_FALSE(streamed(mixed).empty());
  EXPECT_EQ(checkError(mixed), "");
  // gpt2: the tied embedding and head (a Gather reads it), the biases (Gemm's C, added in fp32) stay fp32.
  plan::Plan g = compileStream("gpt2", true);
  EXPECT_FALSE(streamed(g).empty());
  for (const plan::Parameter &q : g.parameters()) {
    const std::string n = q.torch_name().empty() ? q.name() : q.torch_name();
    if (q.tied_embedding_head() || endsWith(n, ".bias") || n.find("ln_") != std::string::npos)
      EXPECT_FALSE(q.streams_bf16()) << n;
  }
  EXPECT_EQ(checkError(g), "");
}

TEST(Bf16WeightStream, TheCheckerRefusesAMarkWhereItWouldChangeTheResults) {
  plan::Plan p = compileStream("llama", true);
  ASSERT_EQ(checkError(p), "");
  auto marked = [&](plan::Plan q, const std::function<bool(const plan::Parameter &)> &which) {
    for (plan::Parameter &x : *q.mutable_parameters())
      if (which(x)) {
        x.set_streams_bf16(true);
        break;
      }
    return checkError(q);
  };
  auto isNorm = [](const plan::Parameter &q) { return q.name().find("norm") != std::string::npos; };
  EXPECT_NE(marked(p, isNorm).find("an op that is not a matrix product reads it"), std::string::npos) << marked(p, isNorm);
  auto isEmbed = [](const plan::Parameter &q) { return q.name().find("embed_tokens") != std::string::npos; };
  EXPECT_NE(marked(p, isEmbed).find("bf16 weight stream"), std::string::npos);

  plan::Plan noCopies = p;
  noCopies.mutable_schedule()->set_weight_copy_bytes(0);
  EXPECT_NE(checkError(noCopies).find("has no bf16 weight copies"), std::string::npos) << checkError(noCopies);

  plan::Plan tf32 = p;
  tf32.set_compute("tf32");
  EXPECT_NE(checkError(tf32).find("not bf16"), std::string::npos) << checkError(tf32);

  plan::Plan mixed = compileStream("llama", true, 1, 1);
  auto inGpuStepped = [&](const plan::Parameter &q) {
    for (int32_t u : q.units())
      if (mixed.units(u).resident() || mixed.units(u).adamw_on_gpu())
        return q.type().shape_size() == 2 && q.name().find("embed_tokens") == std::string::npos;
    return false;
  };
  const std::string e = marked(mixed, inGpuStepped);
  EXPECT_TRUE(e.find("is resident") != std::string::npos || e.find("steps on the GPU") != std::string::npos) << e;
}

TEST(Bf16WeightStream, TheBillTheReportAndTheCostModelCountIt) {
  plan::Plan on = compileStream("llama_small", true), off = compileStream("llama_small", false);
  int64_t elements = 0, aligned = 0;
  for (const plan::Parameter &q : on.parameters())
    if (q.streams_bf16()) elements += q.numel(), aligned += (q.numel() + 127) / 128 * 128;
  ASSERT_GT(elements, 0);
  auto billOn = plan::hostBill(on), billOff = plan::hostBill(off);
  ASSERT_TRUE(bool(billOn) && bool(billOff));
  EXPECT_EQ(billOn->bf16Weights, 2 * aligned);
  EXPECT_EQ(billOff->bf16Weights, 0);
  EXPECT_EQ(billOn->total() - billOn->bf16Weights, billOff->total());
  // Both passes' PREFETCHes move 2 bytes less per streamed element.
  off.mutable_schedule()->set_weight_copy_bytes(on.schedule().weight_copy_bytes()); // the same pack work on the GPU
  auto pOn = plan::predictStep(on, plan::MachineProfile()), pOff = plan::predictStep(off, plan::MachineProfile());
  ASSERT_TRUE(bool(pOn) && bool(pOff));
  int64_t fewer = 0;
  for (const plan::StreamAction &a : on.schedule().actions())
    if (a.kind() == plan::StreamAction::PREFETCH) fewer += 2 * plan::unitBf16Elements(on, a.unit());
  EXPECT_GE(fewer, 2 * elements) << "every streamed weight comes in at least once a step";
  EXPECT_EQ(pOff->h2dBytes - pOn->h2dBytes, fewer);
  EXPECT_LT(pOn->laneBusy[plan::kLaneH2D], pOff->laneBusy[plan::kLaneH2D]);
  EXPECT_GT(pOn->laneBusy[plan::kLaneCPU], pOff->laneBusy[plan::kLaneCPU]) << "the AdamW writes the copies";
}

TEST(Bf16WeightStream, TheHostAdamwWritesTheNewWeightsRounding) {
  const int64_t n = 1000;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p0(n), g(n), m0(n), v0(n);
  for (int64_t i = 0; i < n; ++i) p0[i] = normal(rng), g[i] = normal(rng), m0[i] = 0.1f * normal(rng), v0[i] = 0.01f * std::abs(normal(rng));
  runtime::AdamWHyper h;
  h.lr = 0.0f; // the weights keep their values (times decay 1): ties and NaN go through as chosen
  h.weightDecay = 0.0f;
  // Ties to even, both ways, a denormal, the largest finite, and NaN.
  const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x00008000u, 0x7f7fffffu, 0x7fc00001u, 0x3f80ffffu};
  for (size_t i = 0; i < std::size(special); ++i) std::memcpy(&p0[i], &special[i], 4);
  for (runtime::AdamWIsa isa : {runtime::AdamWIsa::Scalar, runtime::AdamWIsa::Avx2, runtime::AdamWIsa::Avx512}) {
    if (!runtime::adamwIsaSupported(isa)) continue;
    SCOPED_TRACE(int(isa));
    for (int64_t offset : {int64_t(0), int64_t(3)}) { // an unaligned start: the scalar head, then the vector body
      std::vector<float> p(p0), m(m0), v(v0), pPlain(p0), mPlain(m0), vPlain(v0);
      std::vector<uint16_t> b(n, 0xdead);
      runtime::adamwUpdateIsa(isa, p.data() + offset, g.data() + offset, m.data() + offset, v.data() + offset,
                              n - offset, 2, h, true, 1.0f, b.data() + offset);
      runtime::adamwUpdateIsa(isa, pPlain.data() + offset, g.data() + offset, mPlain.data() + offset,
                              vPlain.data() + offset, n - offset, 2, h, true, 1.0f);
      EXPECT_EQ(std::memcmp(p.data(), pPlain.data(), n * 4), 0) << "the copy does not change the update";
      EXPECT_EQ(std::memcmp(m.data(), mPlain.data(), n * 4), 0);
      for (int64_t i = 0; i < offset; ++i) EXPECT_EQ(b[size_t(i)], 0xdead) << "written before the start";
      for (int64_t i = offset; i < n; ++i) ASSERT_EQ(b[size_t(i)], floatToBf16(p[size_t(i)])) << "element " << i;
    }
  }
  EXPECT_EQ(floatToBf16(p0[0]), 0x3f80); // 1 + 2^-8: a tie, to the even 1
  EXPECT_EQ(floatToBf16(p0[1]), 0x3f82); // 1 + 3 x 2^-8: a tie, to the even above
}

// bf16 operands in every product, as the GPU; after step 0 the caller may
// have written the masters (as a resumed run's loader does): the copies are
// rounded again.
void emulateAndRewrite(runtime::Trainer &t, int step) {
  if (step < 0) t.emulatePlanCompute(true);
  if (step == 0) t.state();
}

TEST(Bf16WeightStream, TheStreamExecutorTrainsAsWithoutItBitForBit) {
  for (const char *model : {"llama", "gpt2"}) {
    SCOPED_TRACE(model);
    const TrainRun without = trainRun(compileStream(model, false), model, streamedOptions(1), 3, 1, emulateAndRewrite);
    ASSERT_EQ(without.losses.size(), 3u);
    for (auto [resident, gpuAdamw] : {std::pair{0, 0}, std::pair{1, 0}, std::pair{0, 1}}) {
      plan::Plan p = compileStream(model, true, resident, gpuAdamw);
      ASSERT_FALSE(streamed(p).empty());
      for (uint64_t seed : {1u, 2u})
        expectSameRun(without, trainRun(p, model, streamedOptions(seed), 3, 1, emulateAndRewrite),
                      "resident " + std::to_string(resident) + ", GPU AdamW " + std::to_string(gpuAdamw) + ", seed " +
                          std::to_string(seed));
    }
  }
}

} // namespace
