// The plan checker (runtime/plan/PlanChecker.h): compiled fixture plans check
// clean; each kind of violation, made by mutating a copy, is caught and named.
// Action indices refer to the llama schedule spelled out in
// StreamScheduleTest.cpp (units embed=0, layer.0=1, layer.1=2, head=3).
#include "FixtureTestUtil.h"

#include "codegen/MemoryPlan.h"
#include "driver/Compile.h"
#include "runtime/plan/PlanChecker.h"
#include "runtime/plan/UnitPrograms.h"

#include "llvm/Support/FileSystem.h"

#include <cmath>

using namespace megac;
using namespace megac::testing;

namespace {

// The tests below name actions by their index in these plans: without the
// early step of the embedding's unread rows unless asked (its own tests).
plan::Plan compileFixture(const char *model, int weightSlots = 2, int gradSlots = 2, int residentUnits = 0,
                          bool unreadRowsEarly = false) {
  codegen::ScheduleOptions so;
  so.weightSlots = weightSlots;
  so.gradSlots = gradSlots;
  so.residentUnits = residentUnits;
  so.unreadRowsEarly = unreadRowsEarly;
  return compileFixtureScheduled(model, so);
}

const plan::Plan &llama() {
  static plan::Plan p = compileFixture("llama");
  return p;
}

// The checker's message, or "" when the plan is clean.
std::string check(const plan::Plan &p) {
  llvm::Error e = plan::checkPlan(p);
  return e ? llvm::toString(std::move(e)) : std::string();
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

plan::StreamAction &action(plan::Plan &p, int i) { return *p.mutable_schedule()->mutable_actions(i); }

void removeWait(plan::StreamAction &a, const plan::Plan &p, const std::string &event) {
  std::vector<int32_t> keep;
  for (int32_t e : a.waits())
    if (p.schedule().events(e) != event) keep.push_back(e);
  ASSERT_EQ(keep.size() + 1, size_t(a.waits_size())) << "the action does not wait " << event;
  a.mutable_waits()->Assign(keep.begin(), keep.end());
}

// Moves action `from` to just after action `after` (from < after).
void moveAfter(plan::Plan &p, int from, int after) {
  auto *actions = p.mutable_schedule()->mutable_actions();
  for (int i = from; i < after; ++i) actions->SwapElements(i, i + 1);
}

plan::DeviceRegion &region(plan::Plan &p, plan::DeviceRegion::Kind kind, int index) {
  for (plan::DeviceRegion &r : *p.mutable_schedule()->mutable_regions())
    if (r.kind() == kind && r.index() == index) return r;
  ADD_FAILURE() << "no such region";
  static plan::DeviceRegion none;
  return none;
}

} // namespace

TEST(PlanChecker, CompiledPlansAreClean) {
  EXPECT_EQ(check(llama()), "");
  for (const char *model : {"gpt2", "llama_sdpa", "llama_op23"}) EXPECT_EQ(check(compileFixture(model)), "") << model;
  EXPECT_EQ(check(compileFixture("llama", 3, 1)), "");
  EXPECT_EQ(check(compileFixture("llama", 5, 3)), "");
  EXPECT_EQ(check(compileFixture("llama", 2, 2, 2)), "");
  EXPECT_EQ(check(compileFixture("llama", 2, 1, 4)), "");
}

// A plan whose AdamW would divide by zero or diverge is refused, the field
// named: eps 0 with beta2 0 (what an Optimizer left unset holds) updates by
// g / |g|, NaN wherever a gradient is 0.
TEST(PlanChecker, OptimizerOutOfRange) {
  EXPECT_EQ(check(llama()), "");
  auto withOptimizer = [](auto set) {
    plan::Plan p = llama();
    set(*p.mutable_optimizer());
    return check(p);
  };
  EXPECT_CONTAINS(withOptimizer([](plan::Optimizer &o) { o.set_eps(0); }),
                  "plan check: optimizer: eps is 0.000000; it must be a finite number > 0");
  EXPECT_CONTAINS(withOptimizer([](plan::Optimizer &o) { o.set_beta2(1.0f); }), "optimizer: beta2 is 1.000000; it must be in [0, 1)");
  EXPECT_CONTAINS(withOptimizer([](plan::Optimizer &o) { o.set_beta1(-0.5f); }), "optimizer: beta1 is -0.500000");
  EXPECT_CONTAINS(withOptimizer([](plan::Optimizer &o) { o.set_lr(std::nanf("")); }), "optimizer: lr is nan");
  EXPECT_CONTAINS(withOptimizer([](plan::Optimizer &o) { o.set_weight_decay(-1); }), "optimizer: weight_decay is -1.000000");
  EXPECT_CONTAINS(withOptimizer([](plan::Optimizer &o) { o.set_clip(INFINITY); }), "optimizer: clip is inf");
  EXPECT_CONTAINS(withOptimizer([](plan::Optimizer &o) { o.set_warmup(-3); }), "optimizer: warmup is -3");
  EXPECT_CONTAINS(withOptimizer([](plan::Optimizer &o) { o.set_schedule("linear"); }),
                  "optimizer: schedule is 'linear'; it must be 'constant' or 'cosine'");
  // What codegen starts from without a caller's optimizer: megac compile's defaults.
  const plan::Optimizer d = plan::defaultOptimizer();
  EXPECT_FLOAT_EQ(d.beta2(), 0.999f);
  EXPECT_FLOAT_EQ(d.eps(), 1e-8f);
  EXPECT_FALSE(bool(plan::checkOptimizer(d)));
  EXPECT_FLOAT_EQ(codegen::CodegenOptions().optimizer.eps(), 1e-8f);
}

// Resident embed and layer.0 (the schedule in test/lit/resident-units.test):
// 12 BACKWARD layer.0 into g0, 13 its UPDATE on the compute stream, 14
// BACKWARD embed into g1, 15 its UPDATE.
TEST(PlanChecker, ResidentUnits) {
  const plan::Plan base = compileFixture("llama", 2, 2, 2);
  plan::Plan p = base;
  removeWait(action(p, 13), p, "g0.ready");
  EXPECT_CONTAINS(check(p), "missing wait");
  EXPECT_CONTAINS(check(p), "action 13 (UPDATE of 'layer.0', grad slot 0) does not wait g0.ready");

  p = base; // a resident unit's update moved to the host
  action(p, 15).set_stream(plan::StreamAction::CPU);
  EXPECT_CONTAINS(check(p), "UPDATE of 'embed', grad slot 1) is on stream CPU, not COMPUTE");

  p = base; // with one grad slot, embed's BACKWARD would overwrite layer.0's gradients before its UPDATE
  moveAfter(p, 13, 14);
  action(p, 13).set_grad_slot(0);
  action(p, 14).set_grad_slot(0);
  EXPECT_CONTAINS(check(p), "slot reused early");

  p = base; // a resident unit's weights read from a slot
  action(p, 1).set_weight_slot(0);
  EXPECT_CONTAINS(check(p), "FORWARD of 'embed', weight slot 0) has weight slot 0");

  plan::Plan tied = compileFixture("gpt2"); // embed shares its table with the head
  tied.mutable_units(0)->set_resident(true);
  EXPECT_CONTAINS(check(tied), "unit 'embed' is resident, but it shares a parameter with another unit or has none");

  p = base;
  region(p, plan::DeviceRegion::RESIDENT, 1).set_bytes(184832);
  std::string m = check(p);
  EXPECT_CONTAINS(m, "region size");
  EXPECT_CONTAINS(m, "the weights and AdamW moments of resident unit 'layer.0'");
}

TEST(PlanChecker, DroppedReadyWait) {
  plan::Plan p = llama();
  removeWait(action(p, 2), p, "w0.ready"); // FORWARD of embed
  std::string m = check(p);
  EXPECT_CONTAINS(m, "missing wait");
  EXPECT_CONTAINS(m, "action 2 (FORWARD of 'embed', weight slot 0) does not wait w0.ready");

  p = llama();
  removeWait(action(p, 9), p, "g0.ready"); // OFFLOAD of head
  EXPECT_CONTAINS(check(p), "missing wait");
  EXPECT_CONTAINS(check(p), "OFFLOAD of 'head'");
}

TEST(PlanChecker, PrefetchMovedAfterItsForward) {
  plan::Plan p = llama();
  moveAfter(p, 1, 4); // PREFETCH of layer.0 after FORWARD of layer.0
  std::string m = check(p);
  EXPECT_CONTAINS(m, "read before prefetch");
  EXPECT_CONTAINS(m, "FORWARD of 'layer.0'");
}

TEST(PlanChecker, ComputeOnAnotherUnitsWeights) {
  plan::Plan p = llama();
  action(p, 6).set_unit(1); // "FORWARD of layer.0" on slot 0, which holds layer.1
  EXPECT_CONTAINS(check(p), "read before prefetch");
}

TEST(PlanChecker, TwoLiveRegionsOverlap) {
  using R = plan::DeviceRegion;
  plan::Plan p = llama();
  region(p, R::WEIGHT_SLOT, 1).set_offset(region(p, R::WEIGHT_SLOT, 0).offset());
  std::string m = check(p);
  EXPECT_CONTAINS(m, "region overlap");
  EXPECT_CONTAINS(m, "WEIGHT_SLOT 0");
  EXPECT_CONTAINS(m, "WEIGHT_SLOT 1");

  // A checkpoint and an activation gradient both live at action 8 (BACKWARD of head).
  p = llama();
  int h2 = p.units(2).activation_outputs(0);
  region(p, R::ACTIVATION_GRAD, h2).set_offset(region(p, R::CHECKPOINT, h2).offset());
  m = check(p);
  EXPECT_CONTAINS(m, "region overlap");
  EXPECT_CONTAINS(m, "ACTIVATION_GRAD " + std::to_string(h2));
}

TEST(PlanChecker, TwoLiveArenaValuesOverlap) {
  plan::Plan p = llama();
  plan::Program &prog = *p.mutable_templates(1)->mutable_backward();
  // An elementwise op whose TEMP input and output have the same type: both
  // are live at the op.
  int in = -1, out = -1;
  for (const plan::Program::Op &op : prog.ops()) {
    if (plan::isViewOp(op.type()) || op.inputs_size() == 0 || op.outputs_size() != 1) continue;
    int a = op.inputs(0), b = op.outputs(0);
    if (a < 0 || b < 0 || prog.arena_offsets(a) < 0 || prog.arena_offsets(b) < 0) continue;
    if (prog.values(a).type().SerializeAsString() != prog.values(b).type().SerializeAsString()) continue;
    in = a;
    out = b;
    break;
  }
  ASSERT_GE(in, 0);
  EXPECT_EQ(check(p), "");
  prog.set_arena_offsets(out, prog.arena_offsets(in));
  std::string m = check(p);
  EXPECT_CONTAINS(m, "arena overlap");
  EXPECT_CONTAINS(m, "template 'layer.0' backward");
  EXPECT_CONTAINS(m, "'" + prog.values(out).name() + "'");
}

TEST(PlanChecker, ArenaValueOutsideTheArena) {
  plan::Plan p = llama();
  plan::Program &prog = *p.mutable_templates(0)->mutable_forward();
  prog.set_arena_bytes(prog.arena_bytes() - 256);
  EXPECT_CONTAINS(check(p), "arena overlap");
}

TEST(PlanChecker, ShrunkBudget) {
  plan::Plan p = llama();
  p.mutable_schedule()->set_gpu_budget_bytes(p.schedule().device_bytes() - 1);
  std::string m = check(p);
  EXPECT_CONTAINS(m, "over budget");
  EXPECT_CONTAINS(m, std::to_string(p.schedule().device_bytes()) + " bytes");
}

TEST(PlanChecker, StagingSlotReusedWithoutWaiting) {
  plan::Plan p = llama();
  removeWait(action(p, 17), p, "s0.free"); // OFFLOAD of layer.0 into staging 0, last read by UPDATE of head
  std::string m = check(p);
  EXPECT_CONTAINS(m, "slot reused early");
  EXPECT_CONTAINS(m, "does not wait s0.free");
  EXPECT_CONTAINS(m, "action 10 (UPDATE of 'head'");
}

TEST(PlanChecker, StagingSlotOverwrittenBeforeItsUpdate) {
  plan::Plan p = llama();
  moveAfter(p, 10, 17); // UPDATE of head after the OFFLOAD that refills its staging slot
  EXPECT_CONTAINS(check(p), "slot reused early");
  EXPECT_CONTAINS(check(p), "before the UPDATE of 'head' read it");
}

TEST(PlanChecker, WeightSlotReusedWithoutWaiting) {
  plan::Plan p = llama();
  removeWait(action(p, 3), p, "w0.free"); // PREFETCH of layer.1 into slot 0, read by FORWARD of embed
  std::string m = check(p);
  EXPECT_CONTAINS(m, "slot reused early");
  EXPECT_CONTAINS(m, "PREFETCH of 'layer.1'");
  EXPECT_CONTAINS(m, "does not wait w0.free");
}

TEST(PlanChecker, GradSlotReusedWithoutWaiting) {
  plan::Plan p = llama();
  removeWait(action(p, 16), p, "g0.free"); // BACKWARD of layer.0 into grad slot 0
  EXPECT_CONTAINS(check(p), "slot reused early");
  EXPECT_CONTAINS(check(p), "does not wait g0.free");
}

TEST(PlanChecker, OffloadBeforeItsBackward) {
  plan::Plan p = llama();
  moveAfter(p, 8, 9); // OFFLOAD of head before BACKWARD of head
  EXPECT_CONTAINS(check(p), "read before write");
}

TEST(PlanChecker, BackwardBeforeTheGradientOfItsOutput) {
  plan::Plan p = llama();
  // Action 8 becomes the BACKWARD of layer.1 on slot 0, where its weights
  // still are (PREFETCH at 3): the weights are right, but the gradient of
  // its output comes from the head's BACKWARD, not issued yet.
  plan::StreamAction &b = action(p, 8);
  b.set_unit(2);
  b.set_weight_slot(0);
  b.clear_waits();
  for (int e = 0; e < p.schedule().events_size(); ++e)
    if (p.schedule().events(e) == "w0.ready") b.add_waits(e);
  std::string m = check(p);
  EXPECT_CONTAINS(m, "read before write");
  EXPECT_CONTAINS(m, "action 8 (BACKWARD of 'layer.1'");
  EXPECT_CONTAINS(m, "before the BACKWARD of 'head' adds to it");
}

// The host's early AdamW of the embedding's unread rows (runtime/plan/TokenRows.h):
// action 1 of the default schedule, after the forward's PREFETCH of embed.
TEST(PlanChecker, UnreadRowsStepAfterTheForwardsCopy) {
  const plan::Plan early = compileFixture("llama", 2, 2, 0, /*unreadRowsEarly=*/true);
  ASSERT_EQ(early.schedule().actions(1).kind(), plan::StreamAction::UPDATE_UNREAD_ROWS);
  EXPECT_EQ(check(early), "");

  plan::Plan p = early;
  removeWait(action(p, 1), p, "u0.fetched");
  std::string m = check(p);
  EXPECT_CONTAINS(m, "missing wait");
  EXPECT_CONTAINS(m, "action 1 (UPDATE_UNREAD_ROWS of 'embed') waits no event of action 0 (PREFETCH of 'embed'");

  p = early;
  moveAfter(p, 0, 1); // before the PREFETCH
  EXPECT_CONTAINS(check(p), "read before prefetch");

  p = early;
  action(p, 1).set_unit(1); // layer.0 has no token-indexed table
  EXPECT_CONTAINS(check(p), "has no token-indexed table");

  p = early;
  action(p, 1).set_stream(plan::StreamAction::COMPUTE);
  EXPECT_CONTAINS(check(p), "is on stream COMPUTE, not CPU");

  // After the unit's UPDATE (the last action): the late rows would be stepped twice.
  p = early;
  moveAfter(p, 1, p.schedule().actions_size() - 1);
  EXPECT_CONTAINS(check(p), "comes after the unit's UPDATE");
}

TEST(PlanChecker, CheckpointRegionTooShort) {
  plan::Plan p = llama();
  int h0 = p.units(0).activation_outputs(0);
  region(p, plan::DeviceRegion::CHECKPOINT, h0).set_last_action(10); // read until action 16
  std::string m = check(p);
  EXPECT_CONTAINS(m, "region lifetime");
  EXPECT_CONTAINS(m, "CHECKPOINT " + std::to_string(h0));
}

TEST(PlanChecker, SlotTooSmall) {
  plan::Plan p = llama();
  region(p, plan::DeviceRegion::WEIGHT_SLOT, 1).set_bytes(1024);
  EXPECT_CONTAINS(check(p), "region size");
}

TEST(PlanChecker, ReadPlanRefusesAnUnsafePlan) {
  plan::Plan p = llama();
  p.mutable_schedule()->set_gpu_budget_bytes(1 << 20);
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("megac-checker", "plan", path));
  ASSERT_FALSE(bool(plan::writePlan(p, std::string(path))));
  auto read = plan::readPlan(std::string(path));
  ASSERT_FALSE(bool(read));
  EXPECT_CONTAINS(llvm::toString(read.takeError()), "over budget");
  ASSERT_FALSE(bool(plan::writePlan(llama(), std::string(path))));
  auto ok = plan::readPlan(std::string(path));
  EXPECT_TRUE(bool(ok)) << llvm::toString(ok.takeError());
  llvm::sys::fs::remove(path);
}

// The checker's lifetimes (arenaLifetimes) are its own computation; on every
// fixture plan, with and without kept activations, they agree with the
// planner's (computeLifetimes) value by value.
TEST(PlanChecker, LifetimesAgreeWithThePlannersOnEveryFixture) {
  int programs = 0, values = 0;
  for (const char *model : {"llama", "llama_noopt", "llama_sdpa", "llama_op23", "gpt2", "gpt2_noopt", "llama_small"})
    for (codegen::Recompute r : {codegen::Recompute::All, codegen::Recompute::None}) {
      plan::Plan p = compileFixturePlan(model, "bf16", r);
      for (const plan::Template &t : p.templates())
        for (const plan::Program *prog : plan::templatePrograms(t)) {
          auto mine = plan::arenaLifetimes(*prog);
          auto planner = plan::computeLifetimes(*prog);
          ASSERT_TRUE(bool(mine)) << llvm::toString(mine.takeError());
          ASSERT_TRUE(bool(planner)) << llvm::toString(planner.takeError());
          ASSERT_EQ(mine->size(), planner->size());
          ++programs;
          for (size_t v = 0; v < mine->size(); ++v) {
            const plan::ArenaLife &a = (*mine)[v];
            const plan::ValueLife &b = (*planner)[v];
            SCOPED_TRACE(std::string(model) + " template '" + t.name() + "' value '" + prog->values(int(v)).name() + "'");
            ASSERT_EQ(a.temp, b.inArena);
            if (!a.temp) continue;
            ++values;
            EXPECT_EQ(a.def, b.def);
            EXPECT_EQ(a.last, b.last);
            EXPECT_EQ(a.root, b.root);
            EXPECT_EQ(a.bytes, b.bytes);
          }
        }
    }
  EXPECT_GT(programs, 50);
  EXPECT_GT(values, 1000);
}
