// Grad slots of two sizes (ScheduleOptions.smallGradSlotBytes, plan.proto's
// StreamSchedule.small_grad_slots): past the first two, the grad and staging
// slots hold a smaller unit's gradients; each BACKWARD writes a slot that
// holds its unit's; the plan checker refuses one that does not; the CPU
// stream executor (reads checked, several seeds) trains to the losses and
// state of the plan whose slots are all the largest unit's, in arrival order
// and in a given update order; and auto takes the smaller size only where one
// or two units are much larger than the rest.
#include "TrainRuns.h"

#include "runtime/plan/PlanChecker.h"
#include "runtime/plan/StreamLayout.h"

using namespace megac;
using namespace megac::testing;

namespace {

// llama: embed 65536 bytes of gradients, layer.0 and layer.1 184832, head 65792.
constexpr int64_t kLayerBytes = 184832, kHeadBytes = 65792;

plan::Plan compileSlots(int64_t smallBytes, std::vector<int> order = {}, int slots = 4) {
  codegen::CodegenOptions co;
  co.compute = "fp32";
  co.schedule.residentUnits = 0;
  co.schedule.gpuAdamwUnits = 0;
  co.schedule.gradSlots = slots;
  co.schedule.smallGradSlotBytes = smallBytes;
  co.schedule.hostUpdateOrder = std::move(order);
  return compileFixtureWith("llama", 16, co);
}

std::string checkError(const plan::Plan &p) {
  llvm::Error e = plan::checkPlan(p);
  return e ? llvm::toString(std::move(e)) : std::string();
}

TEST(SmallGradSlots, EachBackwardWritesASlotThatHoldsItsGradients) {
  plan::Plan p = compileSlots(kHeadBytes, {3, 1, 0, 2});
  const plan::StreamSchedule &s = p.schedule();
  ASSERT_EQ(s.small_grad_slots(), 2);
  EXPECT_EQ(s.grad_slot_bytes(), kLayerBytes);
  EXPECT_EQ(s.small_grad_slot_bytes(), kHeadBytes);
  EXPECT_EQ(s.pinned_staging_bytes(), 2 * kLayerBytes + 2 * kHeadBytes);
  EXPECT_EQ(plan::stagingOffset(s, 3), 2 * kLayerBytes + kHeadBytes);
  for (const plan::DeviceRegion &r : s.regions())
    if (r.kind() == plan::DeviceRegion::GRAD_SLOT) EXPECT_EQ(r.bytes(), r.index() < 2 ? kLayerBytes : kHeadBytes);
  std::set<int> layerSlots, smallUnits;
  for (const plan::StreamAction &a : s.actions()) {
    if (a.kind() != plan::StreamAction::BACKWARD) continue;
    EXPECT_GE(plan::gradSlotBytes(s, a.grad_slot()), plan::unitWeightLayout(p, a.unit()).bytes) << a.unit();
    if (a.unit() == 1 || a.unit() == 2) layerSlots.insert(a.grad_slot());
    if (a.grad_slot() >= 2) smallUnits.insert(a.unit());
  }
  EXPECT_EQ(layerSlots, (std::set<int>{0, 1}));
  EXPECT_EQ(smallUnits, (std::set<int>{0, 3})) << "the embedding and the head take the small slots";
  EXPECT_EQ(checkError(p), "");

  // The same without small slots: four of the largest.
  plan::Plan uniform = compileSlots(0, {3, 1, 0, 2});
  EXPECT_EQ(uniform.schedule().small_grad_slots(), 0);
  EXPECT_EQ(uniform.schedule().pinned_staging_bytes(), 4 * kLayerBytes);
  // Auto: four units, two of them the largest: not worth it.
  EXPECT_EQ(compileSlots(-1).schedule().small_grad_slots(), 0);
  // Two slots: both the largest.
  EXPECT_EQ(compileSlots(kHeadBytes, {}, 2).schedule().small_grad_slots(), 0);
}

TEST(SmallGradSlots, TheCheckerRefusesASlotTooSmallForItsUnit) {
  plan::Plan p = compileSlots(kHeadBytes);
  ASSERT_EQ(checkError(p), "");
  // layer.1's gradients into small slot 3: its BACKWARD, OFFLOAD and UPDATE.
  plan::Plan moved = p;
  for (plan::StreamAction &a : *moved.mutable_schedule()->mutable_actions())
    if (a.unit() == 2 && a.grad_slot() >= 0) a.set_grad_slot(3);
  EXPECT_NE(checkError(moved).find("grad slot 3 holds 65792 bytes, the unit's gradients 184832"), std::string::npos)
      << checkError(moved);
  plan::Plan shrunk = p;
  shrunk.mutable_schedule()->set_pinned_staging_bytes(p.schedule().pinned_staging_bytes() - 256);
  EXPECT_NE(checkError(shrunk).find("pinned staging"), std::string::npos) << checkError(shrunk);
  plan::Plan all = p;
  all.mutable_schedule()->set_small_grad_slots(4);
  EXPECT_NE(checkError(all).find("small grad slots"), std::string::npos) << checkError(all);
  plan::Plan bigger = p;
  bigger.mutable_schedule()->set_small_grad_slot_bytes(kLayerBytes);
  EXPECT_NE(checkError(bigger).find("small grad slots"), std::string::npos) << checkError(bigger);
}

TEST(SmallGradSlots, TheStreamExecutorTrainsAsWithSlotsOfOneSize) {
  for (const std::vector<int> &order : {std::vector<int>{}, std::vector<int>{3, 1, 0, 2}}) {
    SCOPED_TRACE(order.empty() ? "arrival order" : "order 3 1 0 2");
    const TrainRun uniform = trainRun(compileSlots(0, order), "llama", streamedOptions(1));
    ASSERT_EQ(uniform.losses.size(), 3u);
    plan::Plan p = compileSlots(kHeadBytes, order);
    ASSERT_EQ(p.schedule().small_grad_slots(), 2);
    for (uint64_t seed : {1u, 2u, 3u})
      expectSameRun(uniform, trainRun(p, "llama", streamedOptions(seed)), "seed " + std::to_string(seed));
  }
}

TEST(SmallGradSlots, AutoOnlyWhereOneOrTwoUnitsAreMuchLarger) {
  // The 8B: embedding and head 2.1 GB of gradients, 32 layers 0.87 GB.
  std::vector<int64_t> l8(34, 872415232);
  l8.front() = l8.back() = 2101346304;
  EXPECT_EQ(codegen::autoSmallGradSlotBytes(l8), 872415232);
  // Four units, two large: a quarter is exceeded.
  EXPECT_EQ(codegen::autoSmallGradSlotBytes({65536, kLayerBytes, kLayerBytes, kHeadBytes}), 0);
  // Units all alike, or the third largest near the largest: nothing to save.
  EXPECT_EQ(codegen::autoSmallGradSlotBytes(std::vector<int64_t>(10, 1000)), 0);
  std::vector<int64_t> near(10, 800);
  near[0] = near[1] = 1000;
  EXPECT_EQ(codegen::autoSmallGradSlotBytes(near), 0);
  std::vector<int64_t> three(10, 500);
  three[0] = three[1] = three[2] = 1000; // three large units: the third largest is one of them
  EXPECT_EQ(codegen::autoSmallGradSlotBytes(three), 0);
  three[2] = 500;
  EXPECT_EQ(codegen::autoSmallGradSlotBytes(three), 500);
  EXPECT_EQ(codegen::autoSmallGradSlotBytes({5, 1}), 0);
}

} // namespace
