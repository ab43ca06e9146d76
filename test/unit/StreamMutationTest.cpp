// Mutation tests of the streaming schedule (issue 22): each mutation of a
// compiled plan, one or more per action kind, must be caught by the plan
// checker (runtime/plan/PlanChecker.h), by the CPU stream executor
// (runtime/stream/StreamExecutor.h, under 16 seeds, reads checked), or by
// both; the table says which, so that a change in either shows.
// The llama plan's schedule (test/lit/schedule.test spells it out): 0
// PREFETCH embed w0, 1 PREFETCH layer.0 w1, 2 FORWARD embed, 3 PREFETCH
// layer.1 w0, 4 FORWARD layer.0, 5 PREFETCH head w1, 6 FORWARD layer.1, 7
// FORWARD head, 8 BACKWARD head g0, 9 OFFLOAD head, 10 UPDATE head, ...
#include "FixtureTestUtil.h"

#include "runtime/plan/PlanChecker.h"
#include "runtime/plan/StreamLayout.h"

#include <climits>
#include <functional>
#include <iostream>

using namespace megac;
using namespace megac::testing;

namespace {

using Kind = plan::StreamAction::Kind;
using R = plan::DeviceRegion;

const plan::Plan &base() {
  static plan::Plan p = compileFixturePlan("llama", "fp32", codegen::Recompute::All, 16, 0);
  return p;
}

int find(const plan::Plan &p, Kind kind, const std::string &unit) {
  for (int i = 0; i < p.schedule().actions_size(); ++i) {
    const plan::StreamAction &a = p.schedule().actions(i);
    if (a.kind() == kind && p.units(a.unit()).name() == unit) return i;
  }
  ADD_FAILURE() << "no " << plan::actionKindName(kind) << " of " << unit;
  return 0;
}

int event(const plan::Plan &p, const std::string &name) {
  for (int e = 0; e < p.schedule().events_size(); ++e)
    if (p.schedule().events(e) == name) return e;
  ADD_FAILURE() << "no event " << name;
  return 0;
}

plan::StreamAction &action(plan::Plan &p, Kind kind, const std::string &unit) {
  return *p.mutable_schedule()->mutable_actions(find(p, kind, unit));
}

void setWaits(plan::StreamAction &a, const std::vector<int> &events) {
  a.clear_waits();
  for (int e : events) a.add_waits(e);
}

void removeWait(plan::Plan &p, plan::StreamAction &a, const std::string &name) {
  std::vector<int> keep;
  for (int32_t e : a.waits())
    if (e != event(p, name)) keep.push_back(e);
  ASSERT_EQ(keep.size() + 1, size_t(a.waits_size())) << "the action does not wait " << name;
  setWaits(a, keep);
}

plan::DeviceRegion &region(plan::Plan &p, R::Kind kind, int index) {
  for (plan::DeviceRegion &r : *p.mutable_schedule()->mutable_regions())
    if (r.kind() == kind && r.index() == index) return r;
  ADD_FAILURE() << "no region";
  static plan::DeviceRegion none;
  return none;
}

int activation(const plan::Plan &p, const std::string &name) {
  for (int a = 0; a < p.activations_size(); ++a)
    if (p.activations(a).name() == name) return a;
  ADD_FAILURE() << "no activation " << name;
  return 0;
}

// The checker's message, or "".
std::string checker(const plan::Plan &p) {
  llvm::Error e = plan::checkPlan(p);
  return e ? llvm::toString(std::move(e)) : std::string();
}

// The executor's first "schedule:" error over seeds 0..15 (`steps` steps
// and an evaluation each, every read checked), or "". Any other error fails
// the test: a mutation must be named, not crash the run or change a number.
std::string executor(const plan::Plan &p, int *seedsCaught, int steps = 1, const std::string &model = "llama") {
  Tensor ids = loadRef(model, "input_ids.pb"), targets = loadRef(model, "targets.pb");
  // A step of the plan's micro-batches (the same batch each).
  const std::vector<std::pair<Tensor, Tensor>> step(size_t(std::max<int64_t>(p.optimizer().grad_accum(), 1)), {ids, targets});
  std::string first;
  *seedsCaught = 0;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    runtime::CpuOptions o;
    o.streamSeed = seed;
    o.checkReads = true;
    auto t = withWeights(runtime::Trainer::create(p, o), p);
    if (!t) return "no trainer";
    llvm::Error e = llvm::Error::success();
    for (int k = 0; k < steps && !e; ++k)
      if (auto st = t->step(step, 1e-3f); !st) e = st.takeError();
    if (!e && steps > 1)
      if (auto l = t->evalLoss(ids, targets); !l) e = l.takeError();
    if (!e) continue;
    std::string m = llvm::toString(std::move(e));
    EXPECT_NE(m.find("schedule: "), std::string::npos) << "seed " << seed << ": " << m;
    ++*seedsCaught;
    if (first.empty()) first = m;
  }
  return first;
}

struct Mutation {
  const char *name;
  std::function<void(plan::Plan &)> mutate;
  bool byChecker, byExecutor; // which must catch it
};

void runMutations(const plan::Plan &b, llvm::ArrayRef<Mutation> mutations, int steps = 1,
                  const std::string &model = "llama") {
  std::cout << "mutation | checker | executor (seeds of 16 that caught it)\n";
  for (const Mutation &m : mutations) {
    SCOPED_TRACE(m.name);
    plan::Plan p = b;
    m.mutate(p);
    const std::string c = checker(p);
    int seeds = 0;
    const std::string x = executor(p, &seeds, steps, model);
    std::cout << m.name << " | " << (c.empty() ? "-" : "caught") << " | "
              << (x.empty() ? "-" : "caught (" + std::to_string(seeds) + ")") << "\n";
    if (!c.empty()) std::cout << "    checker: " << c << "\n";
    if (!x.empty()) std::cout << "    executor: " << x << "\n";
    EXPECT_FALSE(c.empty() && x.empty()) << "caught by neither";
    EXPECT_EQ(!c.empty(), m.byChecker) << c;
    EXPECT_EQ(!x.empty(), m.byExecutor) << x;
  }
}

} // namespace

TEST(StreamMutation, EveryMutationIsCaught) {
  const plan::Plan &b = base();
  ASSERT_EQ(b.units_size(), 4);
  ASSERT_EQ(b.schedule().weight_slots(), 2);
  const Mutation mutations[] = {
      {"PREFETCH: a missing wait (layer.1 into slot 0 without w0.free)",
       [](plan::Plan &p) { removeWait(p, action(p, plan::StreamAction::PREFETCH, "layer.1"), "w0.free"); }, true, true},
      {"PREFETCH: a wrong slot (layer.0 into slot 0, which embed's FORWARD reads)",
       [](plan::Plan &p) { action(p, plan::StreamAction::PREFETCH, "layer.0").set_weight_slot(0); }, true, true},
      {"FORWARD: a moved event (head waits w0.ready, not w1.ready)",
       [](plan::Plan &p) { setWaits(action(p, plan::StreamAction::FORWARD, "head"), {event(p, "w0.ready")}); }, true, true},
      // The checker is stricter than the hardware: layer.0's PREFETCH precedes
      // layer.1's on the H2D stream, so waiting the latter's w0.ready orders
      // the FORWARD after both. No interleaving reads wrong weights.
      {"FORWARD: a moved event that the H2D stream's order makes safe (layer.0 waits w0.ready)",
       [](plan::Plan &p) { setWaits(action(p, plan::StreamAction::FORWARD, "layer.0"), {event(p, "w0.ready")}); }, true,
       false},
      {"FORWARD: a missing wait (embed without w0.ready)",
       [](plan::Plan &p) { removeWait(p, action(p, plan::StreamAction::FORWARD, "embed"), "w0.ready"); }, true, true},
      {"FORWARD: a wrong slot (layer.1 on slot 1)",
       [](plan::Plan &p) { action(p, plan::StreamAction::FORWARD, "layer.1").set_weight_slot(1); }, true, true},
      {"BACKWARD: a missing wait (layer.0 into grad slot 0 without g0.free)",
       [](plan::Plan &p) { removeWait(p, action(p, plan::StreamAction::BACKWARD, "layer.0"), "g0.free"); }, true, true},
      {"BACKWARD: a wrong grad slot (head into 1, its OFFLOAD reads 0)",
       [](plan::Plan &p) { action(p, plan::StreamAction::BACKWARD, "head").set_grad_slot(1); }, true, true},
      {"OFFLOAD: a missing wait (head without g0.ready)",
       [](plan::Plan &p) { removeWait(p, action(p, plan::StreamAction::OFFLOAD, "head"), "g0.ready"); }, true, true},
      {"OFFLOAD: a missing wait (layer.0 into staging 0 without s0.free)",
       [](plan::Plan &p) { removeWait(p, action(p, plan::StreamAction::OFFLOAD, "layer.0"), "s0.free"); }, true, true},
      {"UPDATE: before its D2H (head's UPDATE issued before its OFFLOAD)",
       [](plan::Plan &p) {
         auto *acts = p.mutable_schedule()->mutable_actions();
         acts->SwapElements(find(p, plan::StreamAction::UPDATE, "head"), find(p, plan::StreamAction::OFFLOAD, "head"));
       },
       true, true},
      {"UPDATE: a missing wait (head without s0.ready)",
       [](plan::Plan &p) { removeWait(p, action(p, plan::StreamAction::UPDATE, "head"), "s0.ready"); }, true, true},
      {"region: an offset overlapping a live buffer (CHECKPOINT add_429 on ACTIVATION_GRAD add_729)",
       [](plan::Plan &p) {
         region(p, R::CHECKPOINT, activation(p, "add_429"))
             .set_offset(region(p, R::ACTIVATION_GRAD, activation(p, "add_729")).offset());
       },
       true, true},
      {"region: a weight slot on the other (slot 1 at slot 0's offset)",
       [](plan::Plan &p) { region(p, R::WEIGHT_SLOT, 1).set_offset(region(p, R::WEIGHT_SLOT, 0).offset()); }, true,
       true},
      {"arena: an op's output on its live input's bytes (layer.0 backward)",
       [](plan::Plan &p) {
         plan::Program &prog = *p.mutable_templates(1)->mutable_backward();
         for (const plan::Program::Op &op : prog.ops()) {
           if (op.inputs_size() == 0 || op.outputs_size() != 1 || op.type() == "Reshape" || op.type() == "Identity" ||
               op.type() == "Squeeze" || op.type() == "Unsqueeze" || op.type() == "Flatten")
             continue;
           int a = op.inputs(0), o = op.outputs(0);
           if (a < 0 || o < 0 || prog.arena_offsets(a) < 0 || prog.arena_offsets(o) < 0) continue;
           if (prog.values(a).type().SerializeAsString() != prog.values(o).type().SerializeAsString()) continue;
           prog.set_arena_offsets(o, prog.arena_offsets(a));
           return;
         }
         ADD_FAILURE() << "no elementwise op with a temporary input";
       },
       true, true},
  };
  runMutations(b, mutations);
  // The plan itself: clean for both.
  int seeds = 0;
  EXPECT_EQ(checker(b), "");
  EXPECT_EQ(executor(b, &seeds), "");
}

// Every unit of the llama plan streams and runs its AdamW on the GPU, so both
// moment slots are used twice: backward head (w1, m1), layer.1 (w0, m0),
// layer.0 (w1, m1), embed (w0, m0), each BACKWARD, UPDATE on the compute
// stream, WRITEBACK.
TEST(StreamMutation, EveryGpuAdamwMutationIsCaught) {
  static plan::Plan b = compileFixturePlan("llama", "fp32", codegen::Recompute::All, 16, 0, 0, /*gpuAdamwUnits=*/4);
  ASSERT_EQ(b.units_size(), 4);
  for (const plan::Unit &u : b.units()) ASSERT_TRUE(u.adamw_on_gpu()) << u.name();
  using A = plan::StreamAction;
  const Mutation mutations[] = {
      // Stricter than the hardware again: layer.0's PREFETCH into weight slot 1,
      // ahead of this copy on the H2D stream, waits w1.free, which head's
      // WRITEBACK records with m1.free.
      {"FETCH_MOMENTS: a missing wait that the H2D stream's order makes safe (layer.0 without m1.free)",
       [](plan::Plan &p) { removeWait(p, action(p, A::FETCH_MOMENTS, "layer.0"), "m1.free"); }, true, false},
      {"FETCH_MOMENTS: a wrong slot (layer.1 into moment slot 1, which head's WRITEBACK reads)",
       [](plan::Plan &p) { action(p, A::FETCH_MOMENTS, "layer.1").set_weight_slot(1); }, true, true},
      {"UPDATE: a missing wait (layer.1 without m0.ready)",
       [](plan::Plan &p) { removeWait(p, action(p, A::UPDATE, "layer.1"), "m0.ready"); }, true, true},
      {"UPDATE: on the CPU (head's)",
       [](plan::Plan &p) { action(p, A::UPDATE, "head").set_stream(A::CPU); }, true, true},
      {"WRITEBACK: a missing wait (head without m1.ready)",
       [](plan::Plan &p) { removeWait(p, action(p, A::WRITEBACK, "head"), "m1.ready"); }, true, true},
      {"WRITEBACK: a wrong slot (embed's from weight slot 1)",
       [](plan::Plan &p) { action(p, A::WRITEBACK, "embed").set_weight_slot(1); }, true, true},
      {"BACKWARD: frees its weight slot before the UPDATE (layer.1's BACKWARD records w0.free, its WRITEBACK not)",
       [](plan::Plan &p) {
         plan::StreamAction &w = action(p, A::WRITEBACK, "layer.1");
         std::vector<int> keep;
         for (int32_t e : w.records())
           if (e != event(p, "w0.free")) keep.push_back(e);
         w.clear_records();
         for (int e : keep) w.add_records(e);
         action(p, A::BACKWARD, "layer.1").add_records(event(p, "w0.free"));
       },
       true, true},
      {"region: a moment slot on the other (slot 1 at slot 0's offset)",
       [](plan::Plan &p) { region(p, R::MOMENT_SLOT, 1).set_offset(region(p, R::MOMENT_SLOT, 0).offset()); }, true,
       true},
  };
  runMutations(b, mutations);
  int seeds = 0;
  EXPECT_EQ(checker(b), "");
  EXPECT_EQ(executor(b, &seeds), "");
}

// Overlapping steps: the next step starts while this one's host AdamW runs,
// so 3 steps and an evaluation each. llama: embed's UPDATE is the step's last
// action; gpt2's head shares embed's weight (tied), so its first PREFETCH
// waits embed's update too.
TEST(StreamMutation, EveryOverlapMutationIsCaught) {
  const plan::Plan &b = base();
  ASSERT_TRUE(b.schedule().overlap_steps());
  using A = plan::StreamAction;
  const Mutation mutations[] = {
      {"PREFETCH: the next step's first copy of embed without u0.updated",
       [](plan::Plan &p) { removeWait(p, action(p, A::PREFETCH, "embed"), "u0.updated"); }, true, true},
      {"UPDATE: embed's records no u0.updated",
       [](plan::Plan &p) {
         plan::StreamAction &u = action(p, A::UPDATE, "embed");
         std::vector<int> keep;
         for (int32_t e : u.records())
           if (e != event(p, "u0.updated")) keep.push_back(e);
         u.clear_records();
         for (int e : keep) u.add_records(e);
       },
       true, true},
      {"UPDATE: layer.0's records embed's u0.updated",
       [](plan::Plan &p) { action(p, A::UPDATE, "layer.0").add_records(event(p, "u0.updated")); }, true, false},
      // Stricter than needed: the next step's PREFETCH of layer.0 waits for
      // layer.0's UPDATE, the last from staging slot 0, long before head's
      // OFFLOAD fills it again.
      {"OFFLOAD: head's first OFFLOAD into staging 0 without the previous step's s0.free",
       [](plan::Plan &p) { removeWait(p, action(p, A::OFFLOAD, "head"), "s0.free"); }, true, false},
  };
  runMutations(b, mutations, 3);

  static plan::Plan tied = compileFixturePlan("gpt2", "fp32", codegen::Recompute::All, 16, 0);
  ASSERT_TRUE(tied.schedule().overlap_steps());
  const std::string head = tied.units(tied.units_size() - 1).name(), embed = tied.units(0).name();
  // Stricter than needed here: embed's own first PREFETCH, earlier in the
  // forward, already held the host until that UPDATE ran. The rule stands
  // for weights tied between later units.
  const Mutation tiedMutations[] = {
      {"PREFETCH: gpt2's head without u0.updated (embed's UPDATE ends the tied weight's)",
       [&](plan::Plan &p) { removeWait(p, action(p, A::PREFETCH, head), "u0.updated"); }, true, false},
  };
  runMutations(tied, tiedMutations, 3, "gpt2");
  int seeds = 0;
  EXPECT_EQ(checker(b), "");
  EXPECT_EQ(executor(b, &seeds, 3), "");
  EXPECT_EQ(checker(tied), "");
  EXPECT_EQ(executor(tied, &seeds, 3, "gpt2"), "");
}

// Layer-major accumulation (2 micro-batches a pass): the grad slot's sum
// leaves only after the unit's last micro-batch, a weight slot is freed only
// after its last, micro-batches run in order, and each has its own regions.
TEST(StreamMutation, EveryLayerMajorMutationIsCaught) {
  static plan::Plan b = compileFixturePlan("llama", "fp32", codegen::Recompute::All, 16, 0, 0, 0, true, 2, 2);
  ASSERT_EQ(plan::passMicroBatches(b.schedule()), 2);
  using A = plan::StreamAction;
  // The unit's action of this kind for micro-batch mb.
  auto of = [](plan::Plan &p, Kind kind, const std::string &unit, int mb) -> plan::StreamAction & {
    for (plan::StreamAction &a : *p.mutable_schedule()->mutable_actions())
      if (a.kind() == kind && p.units(a.unit()).name() == unit && a.micro_batch() == mb) return a;
    ADD_FAILURE() << "no " << plan::actionKindName(kind) << " of " << unit << ", micro-batch " << mb;
    return *p.mutable_schedule()->mutable_actions(0);
  };
  // Moves event `name` from one action's records to another's.
  auto moveRecord = [](plan::Plan &p, plan::StreamAction &from, plan::StreamAction &to, const std::string &name) {
    const int e = event(p, name);
    std::vector<int> keep;
    for (int32_t r : from.records())
      if (r != e) keep.push_back(r);
    ASSERT_EQ(keep.size() + 1, size_t(from.records_size())) << "the action does not record " << name;
    from.clear_records();
    for (int r : keep) from.add_records(r);
    to.add_records(e);
  };
  const Mutation mutations[] = {
      {"BACKWARD: head's micro-batch 0 records g0.ready (its OFFLOAD may copy half the sum)",
       [&](plan::Plan &p) { moveRecord(p, of(p, A::BACKWARD, "head", 1), of(p, A::BACKWARD, "head", 0), "g0.ready"); },
       true, true},
      {"FORWARD: layer.0's micro-batch 0 frees its weight slot (micro-batch 1 still reads it)",
       [&](plan::Plan &p) {
         const std::string w = "w" + std::to_string(of(p, A::FORWARD, "layer.0", 1).weight_slot()) + ".free";
         moveRecord(p, of(p, A::FORWARD, "layer.0", 1), of(p, A::FORWARD, "layer.0", 0), w);
       },
       true, true},
      {"BACKWARD: layer.1's micro-batches in the other order",
       [&](plan::Plan &p) {
         plan::StreamAction &first = of(p, A::BACKWARD, "layer.1", 0), &second = of(p, A::BACKWARD, "layer.1", 1);
         first.set_micro_batch(1);
         second.set_micro_batch(0);
         std::swap(*first.mutable_waits(), *second.mutable_waits());
         std::swap(*first.mutable_records(), *second.mutable_records());
       },
       true, true},
      {"regions: micro-batch 1's checkpoint of layer.0's output on micro-batch 0's bytes",
       [&](plan::Plan &p) {
         const int a = activation(p, "add_429");
         plan::DeviceRegion *r0 = nullptr, *r1 = nullptr;
         for (plan::DeviceRegion &r : *p.mutable_schedule()->mutable_regions())
           if (r.kind() == R::CHECKPOINT && r.index() == a) (r.micro_batch() == 0 ? r0 : r1) = &r;
         ASSERT_TRUE(r0 && r1);
         r1->set_offset(r0->offset());
       },
       true, true},
  };
  runMutations(b, mutations, 1);
  int seeds = 0;
  EXPECT_EQ(checker(b), "");
  EXPECT_EQ(executor(b, &seeds, 3), "");
}

// Checkpoint offload (every llama checkpoint that can leave: embed's output
// 'embedding', c0, and layer.0's 'add_429', c1): each copy waits for what it
// reads, the compute stream for what the copies must finish first.
TEST(StreamMutation, EveryCheckpointOffloadMutationIsCaught) {
  static plan::Plan b = compileFixturePlan("llama", "fp32", codegen::Recompute::All, 16, 0, 0, 0, true, 1, 1, INT_MAX);
  ASSERT_EQ(b.schedule().pinned_checkpoint_bytes(), 2 * 8192);
  using A = plan::StreamAction;
  const Mutation mutations[] = {
      {"SAVE_CHECKPOINT: embedding's without c0.written (it may copy before embed's FORWARD wrote it)",
       [](plan::Plan &p) { removeWait(p, action(p, A::SAVE_CHECKPOINT, "embed"), "c0.written"); }, true, true},
      // Only the checker: no region of this small plan reuses embedding's
      // bytes before they come back, so no interleaving reads a wrong value.
      {"FORWARD: layer.1's without c0.saved (the checkpoint's bytes free before its copy out)",
       [](plan::Plan &p) { removeWait(p, action(p, A::FORWARD, "layer.1"), "c0.saved"); }, true, false},
      {"LOAD_CHECKPOINT: add_429's without c1.clear (its bytes may still be read)",
       [](plan::Plan &p) { removeWait(p, action(p, A::LOAD_CHECKPOINT, "layer.0"), "c1.clear"); }, true, true},
      {"BACKWARD: layer.1's without c1.loaded (it may read add_429 before it is back)",
       [](plan::Plan &p) { removeWait(p, action(p, A::BACKWARD, "layer.1"), "c1.loaded"); }, true, true},
      {"LOAD_CHECKPOINT: add_429's from embedding's host bytes",
       [](plan::Plan &p) { action(p, A::LOAD_CHECKPOINT, "layer.0").set_host_offset(action(p, A::SAVE_CHECKPOINT, "embed").host_offset()); },
       true, true},
      {"region: add_429 brought back on embedding's (both live in layer.1's BACKWARD)",
       [](plan::Plan &p) {
         region(p, R::LOADED_CHECKPOINT, activation(p, "add_429"))
             .set_offset(region(p, R::LOADED_CHECKPOINT, activation(p, "embedding")).offset());
       },
       true, true},
  };
  runMutations(b, mutations, 3);
  int seeds = 0;
  EXPECT_EQ(checker(b), "");
  EXPECT_EQ(executor(b, &seeds, 3), "");
}
