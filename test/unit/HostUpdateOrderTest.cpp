// The order of the host's AdamW UPDATEs (ScheduleOptions.hostUpdateOrder,
// codegen/UpdateOrderPolicy.h): the schedule issues them in the order given,
// each after its unit's OFFLOAD, updating out of turn where every grad slot
// holds gradients that wait; the plan checker accepts it; the CPU stream
// executor (its reads checked, under several seeds) gives the arrival-order
// plan's losses and state bit for bit, tied gpt2 included; an order that
// would update a shared parameter before its sum is complete is refused;
// and auto takes the order where the host's AdamW is about as long as the
// compute, not where it is short.
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
