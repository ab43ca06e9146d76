// The bf16 pack cache (runtime/plan/PackCache.h, StreamSchedule.pack_cache_bytes):
// which products store their operands' copies, the region the planner gives
// it (what the programs need, less where the GPU budget leaves less, none in
// plans that are not bf16 or compiled with --pack-cache off), what the plan
// checker refuses, and the cost model's packing with it. The CUDA runtime's
// use of it (the same results, bit for bit) is a GPU test (GpuPackCache).
#include "FixtureTestUtil.h"
#include "ProgramBuilder.h"

#include "codegen/CostModel.h"
#include "runtime/plan/PackCache.h"
#include "runtime/plan/PlanChecker.h"
#include "runtime/plan/StreamLayout.h"

using namespace megac;
using namespace megac::testing;

namespace {

TEST(PackCache, AProductStoresWhatALaterProductReadsAgain) {
  plan::Program p;
  const int32_t x = addValue(p, {4, 8}, kArg), w1 = addValue(p, {8, 8}, kArg), w2 = addValue(p, {8, 8}, kArg);
  const int32_t h = addValue(p, {4, 8}), hv = addValue(p, {4, 8}), y1 = addValue(p, {4, 8}), y2 = addValue(p, {4, 8});
  const int32_t hw = addValue(p, {2, 16}), y3 = addValue(p, {2, 8}), w3 = addValue(p, {16, 8}, kArg);
  addOp(p, "Gemm", {x, w1}, {h});      // 0: w1 is read again by op 4
  addOp(p, "Reshape", {h}, {hv});      // 1: a view of a TEMP: hv is h's bytes
  addOp(p, "Gemm", {hv, w2}, {y1});    // 2: h (as hv) is read again by op 4
  addOp(p, "Reshape", {h}, {hw});      // 3: the same bytes in another shape
  addOp(p, "Gemm", {h, w1}, {y2});     // 4: the last reads of h and w1
  addOp(p, "MatMul", {hw, w3}, {y3});  // 5: [2, 16] is another operand than [4, 8]
  const plan::PackCacheUse use = plan::packCacheUse(p);
  ASSERT_EQ(use.stores.size(), 6u);
  EXPECT_EQ(use.stores[0], (std::array<bool, 2>{false, true}));
  EXPECT_EQ(use.stores[2], (std::array<bool, 2>{true, false}));
  EXPECT_EQ(use.stores[4], (std::array<bool, 2>{false, false}));
  EXPECT_EQ(use.stores[5], (std::array<bool, 2>{false, false}));
  EXPECT_EQ(use.bytes, 256 + 256); // w1 (128 bytes as bf16) and h (64), each 256-aligned
}

TEST(PackCache, AViewOfAnArgumentIsACopyAndEachOperandIsStoredOnce) {
  plan::Program p;
  const int32_t x = addValue(p, {64, 64}, kArg), w = addValue(p, {64, 64}, kArg);
  const int32_t xr = addValue(p, {64, 64}), y1 = addValue(p, {64, 64}), y2 = addValue(p, {64, 64}),
                y3 = addValue(p, {64, 64});
  addOp(p, "Reshape", {x}, {xr}); // the kernel copies an argument's view
  addOp(p, "Gemm", {x, w}, {y1});
  addOp(p, "Gemm", {xr, w}, {y2});
  addOp(p, "Gemm", {x, w}, {y3});
  const plan::PackCacheUse use = plan::packCacheUse(p);
  EXPECT_EQ(use.stores[1], (std::array<bool, 2>{true, true}));   // x and w are read again by op 3
  EXPECT_EQ(use.stores[2], (std::array<bool, 2>{false, false})); // xr is not x; w is stored already
  EXPECT_EQ(use.stores[3], (std::array<bool, 2>{false, false}));
  EXPECT_EQ(use.bytes, 2 * 64 * 64 * 2);
}

plan::Plan compileCache(bool cache, const std::string &compute = "bf16", int64_t gpuBudgetBytes = 0) {
  codegen::CodegenOptions co;
  co.compute = compute;
  co.schedule.residentUnits = 0;
  co.schedule.gpuAdamwUnits = 0;
  co.schedule.packCache = cache;
  if (gpuBudgetBytes > 0) co.schedule.gpuBudgetBytes = gpuBudgetBytes;
  return compileFixtureWith("llama", 16, co);
}

int64_t workspaceBytes(const plan::Plan &p) {
  for (const plan::DeviceRegion &r : p.schedule().regions())
    if (r.kind() == plan::DeviceRegion::WORKSPACE) return r.bytes();
  return -1;
}

std::string checkError(const plan::Plan &p) {
  llvm::Error e = plan::checkPlan(p);
  return e ? llvm::toString(std::move(e)) : std::string();
}

TEST(PackCache, ABf16PlanHoldsWhatItsProgramsNeedInItsWorkspace) {
  plan::Plan on = compileCache(true), off = compileCache(false), tf32 = compileCache(true, "tf32");
  const int64_t need = plan::packCacheNeedBytes(on);
  EXPECT_GT(need, 0);
  EXPECT_EQ(on.schedule().pack_cache_bytes(), need);
  EXPECT_EQ(workspaceBytes(on), plan::workspaceBudgetBytes(on));
  EXPECT_EQ(workspaceBytes(on), workspaceBytes(off) + need);
  EXPECT_EQ(off.schedule().pack_cache_bytes(), 0);
  EXPECT_EQ(tf32.schedule().pack_cache_bytes(), 0);
  EXPECT_EQ(plan::packCacheNeedBytes(tf32), 0);
  // The layer's backward reads the most again: its recomputed forward's
  // operands in the weight gradients, each output gradient twice.
  const plan::Template &layer = on.templates(on.units(1).template_id());
  EXPECT_EQ(need, plan::packCacheUse(layer.backward()).bytes);
  EXPECT_GT(plan::packCacheUse(layer.backward()).bytes, plan::packCacheUse(layer.forward()).bytes);
  EXPECT_EQ(checkError(on), "");
  EXPECT_EQ(checkError(off), "");
}

TEST(PackCache, AGpuBudgetBelowItsNeedShrinksItAndNoneLeftMeansNone) {
  const plan::Plan on = compileCache(true), off = compileCache(false);
  const int64_t need = on.schedule().pack_cache_bytes(), bare = off.schedule().device_bytes();
  ASSERT_GT(need, 4096);
  plan::Plan half = compileCache(true, "bf16", bare + need / 2);
  EXPECT_GT(half.schedule().pack_cache_bytes(), 0);
  EXPECT_LT(half.schedule().pack_cache_bytes(), need);
  EXPECT_EQ(half.schedule().pack_cache_bytes() % 256, 0);
  EXPECT_LE(half.schedule().device_bytes(), bare + need / 2);
  EXPECT_EQ(checkError(half), "");
  plan::Plan none = compileCache(true, "bf16", bare);
  EXPECT_EQ(none.schedule().pack_cache_bytes(), 0);
  EXPECT_EQ(none.schedule().device_bytes(), bare);
}

TEST(PackCache, TheCheckerRefusesACacheThatIsNotABf16PlansOrNotAligned) {
  const plan::Plan p = compileCache(true);
  ASSERT_EQ(checkError(p), "");
  plan::Plan tf32 = p;
  tf32.set_compute("tf32");
  EXPECT_NE(checkError(tf32).find("a bf16 pack cache in a plan whose compute is 'tf32'"), std::string::npos)
      << checkError(tf32);
  for (int64_t bad : {int64_t(-256), int64_t(100), p.schedule().device_bytes() + 256}) {
    plan::Plan q = p;
    q.mutable_schedule()->set_pack_cache_bytes(bad);
    EXPECT_NE(checkError(q).find("a bf16 pack cache of"), std::string::npos) << bad << ": " << checkError(q);
  }
  plan::Plan larger = p; // the field grew, the WORKSPACE region did not
  larger.mutable_schedule()->set_pack_cache_bytes(p.schedule().pack_cache_bytes() + 256);
  EXPECT_NE(checkError(larger).find("region size"), std::string::npos) << checkError(larger);
}

// The cache takes packing off the backward programs (the same values read
// by more than one product) and none off the forward ones, whose products
// that read one operand run one after another (GpuContext::packedA).
TEST(PackCache, TheCostModelPacksEachOperandOncePerProgramRun) {
  const plan::Plan on = compileCache(true), off = compileCache(false);
  const plan::MachineProfile m;
  auto pOn = plan::predictStep(on, m), pOff = plan::predictStep(off, m);
  ASSERT_TRUE(bool(pOn)) << llvm::toString(pOn.takeError());
  ASSERT_TRUE(bool(pOff)) << llvm::toString(pOff.takeError());
  ASSERT_EQ(on.schedule().actions_size(), off.schedule().actions_size());
  int layerBackwards = 0;
  for (int i = 0; i < on.schedule().actions_size(); ++i) {
    const plan::StreamAction &a = on.schedule().actions(i);
    const double saved = pOff->actions[size_t(i)].memoryBytes - pOn->actions[size_t(i)].memoryBytes;
    if (a.kind() == plan::StreamAction::FORWARD) EXPECT_EQ(saved, 0.0) << i;
    if (a.kind() != plan::StreamAction::BACKWARD || on.units(a.unit()).name().rfind("layer", 0) != 0) continue;
    ++layerBackwards;
    EXPECT_GT(saved, 0.0) << on.units(a.unit()).name();
  }
  EXPECT_GT(layerBackwards, 0);
  EXPECT_LT(pOn->laneBusy[plan::kLaneCompute], pOff->laneBusy[plan::kLaneCompute]);
}

} // namespace
