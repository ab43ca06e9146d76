// The order of the host's AdamW UPDATEs (ScheduleOptions.hostUpdateOrder,
// codegen/UpdateOrderPolicy.h): the schedule issues them in the order given,
// each after its unit's OFFLOAD, updating out of turn where every grad slot
// holds gradients that wait; the plan checker accepts it; the CPU stream
// executor (its reads checked, under several seeds) gives the arrival-order
// plan's losses and state bit for bit, tied gpt2 included; an order that
// would update a shared parameter before its sum is complete is refused;
// and auto takes the order where the host's AdamW is about as long as the
// compute, not where it is short, deferring units needed later past the
// boundary where the cost model predicts that shorter (the 8B shape).
#include "TrainRuns.h"

#include "codegen/CostModel.h"
#include "codegen/UpdateOrderPolicy.h"
#include "runtime/plan/PlanChecker.h"
#include "runtime/plan/StreamLayout.h"

#include <cstring>

using namespace megac;
using namespace megac::testing;

namespace {

plan::Plan compileOrdered(const std::string &model, std::vector<int> order, int gradSlots, std::string *error = nullptr) {
  codegen::CodegenOptions co;
  co.compute = "fp32";
  co.schedule.residentUnits = 0;
  co.schedule.gpuAdamwUnits = 0;
  co.schedule.hostUpdateOrder = std::move(order);
  co.schedule.gradSlots = gradSlots;
  frontend::ImportOptions io;
  io.batch = 2;
  io.seq = 16;
  auto p = driver::compileForTraining(fixtureDir(model) + "/model.onnx", io, {}, co);
  if (!p) {
    std::string why = llvm::toString(p.takeError());
    if (error) *error = why;
    else ADD_FAILURE() << why;
    return {};
  }
  return *p;
}

// The units of the host's UPDATEs in schedule order; each after its unit's OFFLOAD.
std::vector<int> updateUnits(const plan::Plan &p) {
  std::vector<int> units;
  std::vector<bool> offloaded(size_t(p.units_size()), false);
  for (const plan::StreamAction &a : p.schedule().actions()) {
    if (a.kind() == plan::StreamAction::OFFLOAD) offloaded[size_t(a.unit())] = true;
    if (a.kind() != plan::StreamAction::UPDATE || a.stream() != plan::StreamAction::CPU) continue;
    EXPECT_TRUE(offloaded[size_t(a.unit())]) << "the UPDATE of unit " << a.unit() << " comes before its OFFLOAD";
    units.push_back(a.unit());
  }
  return units;
}


TEST(HostUpdateOrder, TheScheduleIssuesTheUpdatesInTheOrderGiven) {
  // Arrival order is head (3), layer.1, layer.0, embed (0).
  plan::Plan arrival = compileOrdered("llama", {}, 2);
  EXPECT_EQ(updateUnits(arrival), (std::vector<int>{3, 2, 1, 0}));
  // Three slots hold layer.1's gradients while layer.0 and embed go first.
  plan::Plan held = compileOrdered("llama", {3, 1, 0, 2}, 3);
  EXPECT_EQ(updateUnits(held), (std::vector<int>{3, 1, 0, 2}));
  EXPECT_EQ(held.schedule().grad_slots(), 3);
  EXPECT_EQ(held.schedule().pinned_staging_bytes(), 3 * held.schedule().grad_slot_bytes());
  // Two slots: when layer.0 needs one, head's and layer.1's gradients hold
  // both; layer.1, first of them in the order, is updated out of turn.
  plan::Plan forced = compileOrdered("llama", {1, 0, 2, 3}, 2);
  EXPECT_EQ(updateUnits(forced), (std::vector<int>{2, 1, 0, 3}));
  for (const plan::Plan *p : {&arrival, &held, &forced}) {
    llvm::Error e = plan::checkPlan(*p);
    EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
  }
}

TEST(HostUpdateOrder, TheStreamExecutorGivesArrivalOrdersNumbersBitForBit) {
  for (const char *model : {"llama", "gpt2"}) {
    SCOPED_TRACE(model);
    runtime::CpuOptions directPath;
    directPath.streamSchedule = false;
    const TrainRun direct = trainRun(compileOrdered(model, {}, 2), model, directPath);
    ASSERT_EQ(direct.losses.size(), 3u);
    struct Variant {
      std::vector<int> order;
      int slots;
    };
    for (const Variant &v : {Variant{{3, 1, 0, 2}, 3}, Variant{{3, 1, 2, 0}, 2}, Variant{{3, 0, 1, 2}, 4}}) {
      plan::Plan p = compileOrdered(model, v.order, v.slots);
      for (uint64_t seed : {1u, 2u, 3u})
        expectSameRun(direct, trainRun(p, model, streamedOptions(seed)), "seed " + std::to_string(seed));
    }
  }
}

TEST(HostUpdateOrder, AnOrderThatWouldStepASharedParameterEarlyIsRefused) {
  std::string why;
  // gpt2's embedding (unit 0) and head (unit 3) share the token embedding.
  compileOrdered("gpt2", {0, 1, 2, 3}, 4, &why);
  EXPECT_NE(why.find("puts unit 'embed' before 'head'"), std::string::npos) << why;
  why.clear();
  compileOrdered("llama", {3, 2, 1}, 2, &why);
  EXPECT_NE(why.find("leaves out unit 'embed'"), std::string::npos) << why;
  why.clear();
  compileOrdered("llama", {3, 2, 1, 1}, 2, &why);
  EXPECT_NE(why.find("names unit 1, which"), std::string::npos) << why;
}

// llama_small, every unit streamed and stepped on the host, on a profile
// shaped like the 8B's on the lent machines: the GPU's rates scaled so that
// its compute lane is 4/3 of its H2D lane, and the host AdamW's so that it
// takes `cpuShare` of the compute lane's time.
plan::Plan compileAuto(double cpuShare, double *arrivalStep, double *autoStep) {
  codegen::CodegenOptions co;
  co.schedule.residentUnits = 0;
  co.schedule.gpuAdamwUnits = 0;
  plan::MachineProfile &m = co.schedule.profile;
  for (int pass = 0; pass < 2; ++pass) {
    plan::Plan p = compileFixtureWith("llama_small", 16, co);
    auto first = plan::predictStep(p, m);
    EXPECT_TRUE(bool(first));
    if (!first) return {};
    const double h2d = first->laneBusy[plan::kLaneH2D], compute = first->laneBusy[plan::kLaneCompute],
                 cpu = first->laneBusy[plan::kLaneCPU];
    if (pass == 0) {
      const double slower = compute / (4.0 / 3.0 * h2d);
      for (double *rate : {&m.gemmBf16Tflops, &m.gemmTf32Tflops, &m.gemmFp32Tflops, &m.attentionBf16Tflops, &m.gpuHbmGBps})
        *rate *= slower;
      m.attentionBf16PsPerElem /= slower;
    } else {
      m.cpuAdamwParamsPerS *= cpu / (cpuShare * compute);
      m.cpuAdamwUnderDmaParamsPerS *= cpu / (cpuShare * compute);
    }
  }
  plan::Plan p0 = compileFixtureWith("llama_small", 16, co);
  co.schedule.updateOrder = codegen::UpdateOrder::Auto;
  plan::Plan p1 = compileFixtureWith("llama_small", 16, co);
  auto a = plan::predictStep(p0, m), b = plan::predictStep(p1, m);
  EXPECT_TRUE(a && b);
  if (!a || !b) return {};
  *arrivalStep = a->stepSeconds;
  *autoStep = b->stepSeconds;
  return p1;
}

TEST(HostUpdateOrder, AutoTakesTheOrderWhereTheHostsAdamWIsAsLongAsTheCompute) {
  double arrivalStep = 0, autoStep = 0;
  plan::Plan p = compileAuto(0.9, &arrivalStep, &autoStep);
  ASSERT_TRUE(p.has_schedule());
  const std::vector<int> units = updateUnits(p);
  EXPECT_FALSE(std::is_sorted(units.rbegin(), units.rend())) << "arrival order kept";
  EXPECT_GT(p.schedule().grad_slots(), 2);
  EXPECT_LT(autoStep, 0.99 * arrivalStep);
  std::printf("llama_small, host AdamW 0.9 of the compute lane: arrival order %.4g ms, auto %.4g ms (%d grad slots)\n",
              1e3 * arrivalStep, 1e3 * autoStep, p.schedule().grad_slots());
  llvm::Error e = plan::checkPlan(p);
  EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
  // A host 10 times faster than that: nothing to gain, arrival order.
  plan::Plan fast = compileAuto(0.09, &arrivalStep, &autoStep);
  const std::vector<int> fastUnits = updateUnits(fast);
  EXPECT_TRUE(std::is_sorted(fastUnits.rbegin(), fastUnits.rend()));
  EXPECT_EQ(fast.schedule().grad_slots(), 2);
}

} // namespace

// deferredPast moves one unit from before the first-needed one to the tail
// after it, in ascending unit order there.
TEST(HostUpdateOrder, DeferredPastPutsTheUnitInTheTailInUnitOrder) {
  const std::vector<int> order{6, 5, 3, 2, 1, 0, 4, 9};
  EXPECT_EQ(codegen::deferredPast(order, 1, 5), (std::vector<int>{6, 3, 2, 1, 0, 4, 5, 9}));
  EXPECT_EQ(codegen::deferredPast(order, 4, 5), (std::vector<int>{6, 5, 3, 2, 0, 1, 4, 9}));
  EXPECT_EQ(codegen::deferredPast(order, 0, 5), (std::vector<int>{5, 3, 2, 1, 0, 4, 6, 9}));
  EXPECT_EQ(codegen::deferredPast({3, 2, 0}, 0, 2), (std::vector<int>{2, 0, 3}));
}

// The 8B shape, every unit streamed and stepped on the host at 8 x 2048 (the
// built-in H200 profile, --host-mem 118): the greedy order leaves the host on
// layers the next forward needs late while the first layers' gradients come;
// deferring some of them past the first-needed unit is predicted at least 1%
// shorter (2.423 -> 2.364 s when written), the order is valid (the checker),
// and compile's auto takes it.
TEST(HostUpdateOrder, DeferringUnitsNeededLaterShortensThe8BsBoundary) {
  const std::string model = std::string(MEGAC_TEST_DATA) + "/shapes_only/llama8b.onnx";
  frontend::ImportOptions io;
  io.batch = 8;
  io.seq = 2048;
  codegen::CodegenOptions co;
  co.compute = "bf16";
  co.schedule.residentUnits = 0;
  co.schedule.gpuAdamwUnits = 0;
  co.schedule.weightSlots = 2;
  co.schedule.gpuBudgetBytes = int64_t(71) << 30;
  co.schedule.hostBudgetBytes = int64_t(118) << 30; // as compile's 8B rows (whose auto leaves the bf16 stream off there)
  co.schedule.updateOrder = codegen::UpdateOrder::Arrival;
  auto arrival = driver::compileForTraining(model, io, {}, co);
  ASSERT_TRUE(bool(arrival)) << llvm::toString(arrival.takeError());
  plan::Plan p = *arrival;
  const plan::MachineProfile &m = co.schedule.profile;
  auto g = codegen::greedyUpdateOrder(p, co.schedule);
  ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
  ASSERT_FALSE(g->slotCounts.empty());
  codegen::ScheduleOptions so = co.schedule;
  so.gradSlots = g->slotCounts.back();
  so.hostUpdateOrder = g->order;
  if (llvm::Error e = codegen::buildStreamSchedule(p, so)) FAIL() << llvm::toString(std::move(e));
  auto greedy = plan::predictStep(p, m);
  ASSERT_TRUE(bool(greedy)) << llvm::toString(greedy.takeError());
  auto deferred = codegen::deferNearTheBoundary(p, so, so.hostUpdateOrder, greedy->stepSeconds, m);
  ASSERT_TRUE(bool(deferred)) << llvm::toString(deferred.takeError());
  so.hostUpdateOrder = *deferred;
  if (llvm::Error e = codegen::buildStreamSchedule(p, so)) FAIL() << llvm::toString(std::move(e));
  llvm::Error e = plan::checkPlan(p);
  EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
  auto after = plan::predictStep(p, m);
  ASSERT_TRUE(bool(after)) << llvm::toString(after.takeError());
  EXPECT_LT(after->stepSeconds, 0.99 * greedy->stepSeconds);
  std::printf("8B, 8 x 2048, every unit streamed, %d grad slots: greedy order %.4g s, deferred %.4g s\n", so.gradSlots,
              greedy->stepSeconds, after->stepSeconds);
  // Compile's auto, which chooses the slots too.
  co.schedule.updateOrder = codegen::UpdateOrder::Auto;
  auto autoPlan = driver::compileForTraining(model, io, {}, co);
  ASSERT_TRUE(bool(autoPlan)) << llvm::toString(autoPlan.takeError());
  auto autoStep = plan::predictStep(*autoPlan, m);
  ASSERT_TRUE(bool(autoStep)) << llvm::toString(autoStep.takeError());
  EXPECT_LT(autoStep->stepSeconds, 0.99 * greedy->stepSeconds);
}
