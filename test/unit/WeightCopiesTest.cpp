// bf16 copies of the weight slots (--bf16-weight-copies, plan.proto's
// WEIGHT_COPY): the schedule adds one per slot in bf16 plans only, the plan
// checker refuses copies that are missing, too small or in a plan that is
// not bf16, and the cost model takes the streamed units' weights off their
// products' packing (and puts one pack on each PREFETCH).
#include "FixtureTestUtil.h"

#include "codegen/CostModel.h"
#include "runtime/plan/PlanChecker.h"
#include "runtime/plan/StreamLayout.h"

using namespace megac;
using namespace megac::testing;

namespace {

plan::Plan compileCopies(bool copies, const std::string &compute = "bf16") {
  codegen::CodegenOptions co;
  co.compute = compute;
  co.schedule.residentUnits = 0;
  co.schedule.gpuAdamwUnits = 0;
  co.schedule.bf16WeightCopies = copies;
  return compileFixtureWith("llama", 16, co);
}

int countRegions(const plan::Plan &p, plan::DeviceRegion::Kind k) {
  int n = 0;
  for (const plan::DeviceRegion &r : p.schedule().regions()) n += r.kind() == k;
  return n;
}

std::string checkError(const plan::Plan &p) {
  llvm::Error e = plan::checkPlan(p);
  return e ? llvm::toString(std::move(e)) : std::string();
}

TEST(WeightCopies, OnePerSlotInBf16PlansOnly) {
  plan::Plan on = compileCopies(true), off = compileCopies(false), tf32 = compileCopies(true, "tf32");
  const plan::StreamSchedule &s = on.schedule();
  EXPECT_EQ(s.weight_copy_bytes(), plan::weightCopyBytes(s.weight_slot_bytes()));
  EXPECT_EQ(countRegions(on, plan::DeviceRegion::WEIGHT_COPY), s.weight_slots());
  EXPECT_GE(s.device_bytes(), off.schedule().device_bytes() + s.weight_slots() * s.weight_copy_bytes());
  EXPECT_EQ(off.schedule().weight_copy_bytes(), 0);
  EXPECT_EQ(countRegions(off, plan::DeviceRegion::WEIGHT_COPY), 0);
  EXPECT_EQ(tf32.schedule().weight_copy_bytes(), 0);
  EXPECT_EQ(countRegions(tf32, plan::DeviceRegion::WEIGHT_COPY), 0);
  EXPECT_EQ(checkError(on), "");
}

TEST(WeightCopies, TheCheckerRefusesCopiesThatCannotHoldTheSlots) {
  plan::Plan p = compileCopies(true);
  ASSERT_EQ(checkError(p), "");
  plan::StreamSchedule &s = *p.mutable_schedule();

  plan::Plan small = p;
  small.mutable_schedule()->set_weight_copy_bytes(s.weight_copy_bytes() - 256);
  EXPECT_NE(checkError(small).find("region size"), std::string::npos) << checkError(small);

  plan::Plan shrunk = p; // the field holds, one region does not
  for (plan::DeviceRegion &r : *shrunk.mutable_schedule()->mutable_regions())
    if (r.kind() == plan::DeviceRegion::WEIGHT_COPY && r.index() == 1) r.set_bytes(r.bytes() - 256);
  EXPECT_NE(checkError(shrunk).find("region size"), std::string::npos) << checkError(shrunk);

  plan::Plan missing = p;
  auto *regions = missing.mutable_schedule()->mutable_regions();
  for (int i = 0; i < regions->size(); ++i)
    if (regions->Get(i).kind() == plan::DeviceRegion::WEIGHT_COPY) {
      regions->DeleteSubrange(i, 1);
      break;
    }
  EXPECT_NE(checkError(missing).find("no WEIGHT_COPY region 0"), std::string::npos) << checkError(missing);

  plan::Plan tf32 = p;
  tf32.set_compute("tf32");
  EXPECT_NE(checkError(tf32).find("bf16 weight copies in a plan whose compute is 'tf32'"), std::string::npos)
      << checkError(tf32);
}

// Per FORWARD/BACKWARD of a layer unit, the model's memory bytes fall by the
// packing (6 bytes an element) of the unit's matrices, which its products
// read; each PREFETCH packs the unit once (1.5 bytes per fp32 byte).
TEST(WeightCopies, TheCostModelPacksEachWeightOncePerLoad) {
  plan::Plan on = compileCopies(true), off = compileCopies(false);
  const plan::MachineProfile m;
  auto pOn = plan::predictStep(on, m), pOff = plan::predictStep(off, m);
  ASSERT_TRUE(bool(pOn)) << llvm::toString(pOn.takeError());
  ASSERT_TRUE(bool(pOff)) << llvm::toString(pOff.takeError());
  ASSERT_EQ(on.schedule().actions_size(), off.schedule().actions_size());
  int layerForwards = 0, prefetches = 0;
  for (int i = 0; i < on.schedule().actions_size(); ++i) {
    const plan::StreamAction &a = on.schedule().actions(i);
    const plan::Unit &u = on.units(a.unit());
    const double saved = pOff->actions[size_t(i)].memoryBytes - pOn->actions[size_t(i)].memoryBytes;
    if (a.kind() == plan::StreamAction::PREFETCH) {
      ++prefetches;
      EXPECT_DOUBLE_EQ(-saved, 1.5 * double(plan::unitWeightLayout(on, a.unit()).bytes));
      continue;
    }
    if (a.kind() != plan::StreamAction::FORWARD || u.name().rfind("layer", 0) != 0) continue;
    ++layerForwards;
    double matrices = 0; // every 2-D parameter of a layer is a product's weight
    for (int32_t q : u.parameters())
      if (on.parameters(q).type().shape_size() == 2) matrices += double(on.parameters(q).numel());
    EXPECT_GT(matrices, 0);
    EXPECT_DOUBLE_EQ(saved, 6.0 * matrices) << u.name();
  }
  EXPECT_GT(layerForwards, 0);
  EXPECT_GT(prefetches, 0);
  EXPECT_LT(pOn->laneBusy[plan::kLaneCompute], pOff->laneBusy[plan::kLaneCompute]);
}

} // namespace
