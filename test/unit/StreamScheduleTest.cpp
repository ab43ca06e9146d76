// The streaming schedule (codegen/StreamSchedule.h) and the weight-slot
// layout (runtime/plan/StreamLayout.h) on the llama fixture: units embed,
// layer.0, layer.1, head; every action, event and region lifetime below is
// worked out by hand.
#include "FixtureTestUtil.h"

#include "driver/Compile.h"
#include "runtime/plan/FusedAttention.h"
#include "runtime/plan/PlanChecker.h"
#include "runtime/plan/StreamLayout.h"

using namespace megac;
using namespace megac::testing;

namespace {

// Without the early step of the embedding's unread rows (UPDATE_UNREAD_ROWS),
// unless asked: its own test below.
plan::Plan compileLlama(int weightSlots = 2, int gradSlots = 2, bool overlapSteps = false, bool unreadRowsEarly = false) {
  codegen::ScheduleOptions so;
  so.weightSlots = weightSlots;
  so.gradSlots = gradSlots;
  so.overlapSteps = overlapSteps;
  so.unreadRowsEarly = unreadRowsEarly;
  return compileFixtureScheduled("llama", so);
}

// "P0 w0 | waits | records": kind letter, unit, slots, events.
std::vector<std::string> render(const plan::StreamSchedule &s) {
  std::vector<std::string> out;
  for (const plan::StreamAction &a : s.actions()) {
    std::string t(1, plan::actionKindName(a.kind())[0]);
    t += std::to_string(a.unit());
    if (a.weight_slot() >= 0) t += " w" + std::to_string(a.weight_slot());
    if (a.grad_slot() >= 0) t += " g" + std::to_string(a.grad_slot());
    t += " |";
    for (int e : a.waits()) t += " " + s.events(e);
    t += " |";
    for (int e : a.records()) t += " " + s.events(e);
    out.push_back(t);
  }
  return out;
}

const plan::DeviceRegion *region(const plan::StreamSchedule &s, plan::DeviceRegion::Kind kind, int index) {
  for (const plan::DeviceRegion &r : s.regions())
    if (r.kind() == kind && r.index() == index) return &r;
  ADD_FAILURE() << "no region " << plan::regionKindName(kind) << " " << index;
  static plan::DeviceRegion none;
  return &none;
}

} // namespace

TEST(StreamSchedule, LlamaTwoWeightSlotsActionByAction) {
  plan::Plan p = compileLlama();
  ASSERT_EQ(p.units_size(), 4);
  const plan::StreamSchedule &s = p.schedule();
  EXPECT_EQ(s.weight_slots(), 2);
  EXPECT_EQ(s.grad_slots(), 2);
  std::vector<std::string> want = {
      // Forward: PREFETCH(i+1) is issued before FORWARD(i).
      "P0 w0 | | w0.ready",
      "P1 w1 | | w1.ready",
      "F0 w0 | w0.ready | w0.free",
      "P2 w0 | w0.free | w0.ready",
      "F1 w1 | w1.ready | w1.free",
      "P3 w1 | w1.free | w1.ready",
      "F2 w0 | w0.ready | w0.free",
      "F3 w1 | w1.ready | w1.free",
      // Backward: head (3) and layer.1 (2) are still resident: no PREFETCH.
      "B3 w1 g0 | w1.ready | w1.free g0.ready",
      "O3 g0 | g0.ready | g0.free s0.ready",
      "U3 g0 | s0.ready | s0.free",
      "P1 w1 | w1.free | w1.ready",
      "B2 w0 g1 | w0.ready | w0.free g1.ready",
      "O2 g1 | g1.ready | g1.free s1.ready",
      "U2 g1 | s1.ready | s1.free",
      "P0 w0 | w0.free | w0.ready",
      "B1 w1 g0 | w1.ready g0.free | w1.free g0.ready",
      "O1 g0 | g0.ready s0.free | g0.free s0.ready",
      "U1 g0 | s0.ready | s0.free",
      "B0 w0 g1 | w0.ready g1.free | w0.free g1.ready",
      "O0 g1 | g1.ready s1.free | g1.free s1.ready",
      "U0 g1 | s1.ready | s1.free",
  };
  EXPECT_EQ(render(s), want);
  for (const plan::StreamAction &a : s.actions()) {
    plan::StreamAction::Stream stream = a.kind() == plan::StreamAction::PREFETCH  ? plan::StreamAction::H2D
                                        : a.kind() == plan::StreamAction::OFFLOAD ? plan::StreamAction::D2H
                                        : a.kind() == plan::StreamAction::UPDATE  ? plan::StreamAction::CPU
                                                                                  : plan::StreamAction::COMPUTE;
    EXPECT_EQ(a.stream(), stream);
  }
}

// Overlapping steps (the default): the same actions; each UPDATE also
// records its unit's "updated" event, which the next step's first PREFETCH
// of the unit waits (the host's AdamW of the step may still run), and the
// first OFFLOAD into each staging slot waits its `free` event from the
// previous step.
TEST(StreamSchedule, OverlappingStepsWaitForThePreviousStepsUpdates) {
  plan::Plan p = compileLlama(2, 2, /*overlapSteps=*/true);
  const plan::StreamSchedule &s = p.schedule();
  EXPECT_TRUE(s.overlap_steps());
  std::vector<std::string> want = {
      "P0 w0 | u0.updated | w0.ready",
      "P1 w1 | u1.updated | w1.ready",
      "F0 w0 | w0.ready | w0.free",
      "P2 w0 | u2.updated w0.free | w0.ready",
      "F1 w1 | w1.ready | w1.free",
      "P3 w1 | u3.updated w1.free | w1.ready",
      "F2 w0 | w0.ready | w0.free",
      "F3 w1 | w1.ready | w1.free",
      "B3 w1 g0 | w1.ready | w1.free g0.ready",
      "O3 g0 | g0.ready s0.free | g0.free s0.ready",
      "U3 g0 | s0.ready | s0.free u3.updated",
      "P1 w1 | w1.free | w1.ready",
      "B2 w0 g1 | w0.ready | w0.free g1.ready",
      "O2 g1 | g1.ready s1.free | g1.free s1.ready",
      "U2 g1 | s1.ready | s1.free u2.updated",
      "P0 w0 | w0.free | w0.ready",
      "B1 w1 g0 | w1.ready g0.free | w1.free g0.ready",
      "O1 g0 | g0.ready s0.free | g0.free s0.ready",
      "U1 g0 | s0.ready | s0.free u1.updated",
      "B0 w0 g1 | w0.ready g1.free | w0.free g1.ready",
      "O0 g1 | g1.ready s1.free | g1.free s1.ready",
      "U0 g1 | s1.ready | s1.free u0.updated",
  };
  EXPECT_EQ(render(s), want);
  EXPECT_FALSE(compileLlama().schedule().overlap_steps());
}

// The embedding's table is read only by the Gather of the tokens: the
// forward's PREFETCH of embed also records u0.fetched, and the host's AdamW of
// the rows no token reads follows it on the CPU (runtime/plan/TokenRows.h).
// Nothing else changes; no other unit has such a table, and the backward's
// PREFETCH of embed records nothing more.
TEST(StreamSchedule, UnreadRowsStepAfterTheForwardsCopyOfTheTable) {
  plan::Plan base = compileLlama(2, 2, /*overlapSteps=*/true);
  plan::Plan p = compileLlama(2, 2, /*overlapSteps=*/true, /*unreadRowsEarly=*/true);
  std::vector<std::string> want = render(base.schedule());
  ASSERT_EQ(want[0], "P0 w0 | u0.updated | w0.ready");
  want[0] += " u0.fetched";
  want.insert(want.begin() + 1, "U0 | u0.fetched |");
  EXPECT_EQ(render(p.schedule()), want);
  EXPECT_EQ(p.schedule().actions(1).kind(), plan::StreamAction::UPDATE_UNREAD_ROWS);
  EXPECT_EQ(p.schedule().actions(1).stream(), plan::StreamAction::CPU);
  llvm::Error checked = plan::checkPlan(p);
  EXPECT_FALSE(bool(checked)) << llvm::toString(std::move(checked));
  // With --clip the AdamW waits for the global norm: no early step.
  codegen::CodegenOptions co;
  co.schedule.overlapSteps = true;
  co.schedule.unreadRowsEarly = true;
  co.optimizer.set_clip(1.0f);
  plan::Plan clip = compileFixtureWith("llama", 16, co);
  for (const plan::StreamAction &a : clip.schedule().actions())
    EXPECT_NE(a.kind(), plan::StreamAction::UPDATE_UNREAD_ROWS);
}

TEST(StreamSchedule, ThreeWeightSlotsPrefetchTwoAheadAndReuseThreeResidents) {
  plan::Plan p = compileLlama(3, 1);
  std::vector<std::string> want = {
      "P0 w0 | | w0.ready",
      "P1 w1 | | w1.ready",
      "P2 w2 | | w2.ready",
      "F0 w0 | w0.ready | w0.free",
      "P3 w0 | w0.free | w0.ready",
      "F1 w1 | w1.ready | w1.free",
      "F2 w2 | w2.ready | w2.free",
      "F3 w0 | w0.ready | w0.free",
      "B3 w0 g0 | w0.ready | w0.free g0.ready",
      "O3 g0 | g0.ready | g0.free s0.ready",
      "U3 g0 | s0.ready | s0.free",
      "P0 w0 | w0.free | w0.ready",
      "B2 w2 g0 | w2.ready g0.free | w2.free g0.ready",
      "O2 g0 | g0.ready s0.free | g0.free s0.ready",
      "U2 g0 | s0.ready | s0.free",
      "B1 w1 g0 | w1.ready g0.free | w1.free g0.ready",
      "O1 g0 | g0.ready s0.free | g0.free s0.ready",
      "U1 g0 | s0.ready | s0.free",
      "B0 w0 g0 | w0.ready g0.free | w0.free g0.ready",
      "O0 g0 | g0.ready s0.free | g0.free s0.ready",
      "U0 g0 | s0.ready | s0.free",
  };
  EXPECT_EQ(render(p.schedule()), want);
}

TEST(StreamSchedule, LlamaRegions) {
  plan::Plan p = compileLlama();
  const plan::StreamSchedule &s = p.schedule();
  using R = plan::DeviceRegion;
  // A layer: q, o 64x64; k, v 64x32; gate, up, down 64x176; two norms of 64
  // (every size already a multiple of 256 bytes): 46208 floats.
  EXPECT_EQ(s.weight_slot_bytes(), 46208 * 4);
  EXPECT_EQ(s.grad_slot_bytes(), 46208 * 4);
  EXPECT_EQ(s.pinned_staging_bytes(), 2 * 46208 * 4);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(region(s, R::WEIGHT_SLOT, k)->bytes(), 46208 * 4);
    EXPECT_EQ(region(s, R::GRAD_SLOT, k)->last_action(), 21);
  }
  // Activations: h0 = embed -> layer.0, h1 = layer.0 -> layer.1, h2 = layer.1 -> head, loss.
  int h0 = p.units(0).activation_outputs(0), h1 = p.units(1).activation_outputs(0);
  int h2 = p.units(2).activation_outputs(0), loss = p.units(3).activation_outputs(0);
  auto life = [&](R::Kind k, int a) {
    const R *r = region(s, k, a);
    return std::make_pair(r->first_action(), r->last_action());
  };
  // Action indices from the test above: F0=2 F1=4 F2=6 F3=7 B3=8 B2=12 B1=16 B0=19.
  EXPECT_EQ(life(R::CHECKPOINT, h0), std::make_pair(2, 16));
  EXPECT_EQ(life(R::CHECKPOINT, h1), std::make_pair(4, 12));
  EXPECT_EQ(life(R::CHECKPOINT, h2), std::make_pair(6, 8));
  EXPECT_EQ(life(R::CHECKPOINT, loss), std::make_pair(7, 21));
  EXPECT_EQ(life(R::ACTIVATION_GRAD, loss), std::make_pair(8, 8));
  EXPECT_EQ(life(R::ACTIVATION_GRAD, h2), std::make_pair(8, 12));
  EXPECT_EQ(life(R::ACTIVATION_GRAD, h1), std::make_pair(12, 16));
  EXPECT_EQ(life(R::ACTIVATION_GRAD, h0), std::make_pair(16, 19));
  EXPECT_EQ(region(s, R::CHECKPOINT, h0)->bytes(), 2 * 16 * 64 * 4);
  EXPECT_EQ(region(s, R::CHECKPOINT, loss)->bytes(), 256);
  for (int a = 0; a < p.activations_size(); ++a)
    if (p.activations(a).kind() == plan::Activation::DATA_TOKENS || p.activations(a).kind() == plan::Activation::DATA_TARGETS) {
      EXPECT_EQ(life(R::DATA, a), std::make_pair(0, 21));
    }
  // cuBLASLt's 32 MiB and the largest op's scratch: the attention
  // gradient's (the import pipeline fuses the eager attention into a 3-D
  // Attention op): two fp32 score matrices of 2 x 2 kv-head units, each 2 x 16
  // stacked query rows by 16 keys, and its operands gathered to [B, H, S, D]
  // (Q, Y, dQ with 4 heads; K, V, dK, dV with 2). It exceeds
  // megac.LinearCrossEntropy's (one chunk of fp32 logits [32, 256], each
  // row's loss and count).
  const int64_t attentionScratch = 2 * (2 * 2 * 32 * 16 * 4) + 3 * (2 * 4 * 16 * 16 * 4) + 4 * (2 * 2 * 16 * 16 * 4);
  EXPECT_EQ(plan::linearCrossEntropyWorkspaceBytes(false, 32, 64, 256, 0, false), 32 * 256 * 4 + 2 * 256);
  EXPECT_GT(attentionScratch, 32 * 256 * 4 + 2 * 256);
  EXPECT_EQ(region(s, R::WORKSPACE, 0)->bytes(), (32 << 20) + attentionScratch);
  int64_t arena = 0;
  for (const plan::Template &t : p.templates()) arena = std::max({arena, t.forward().arena_bytes(), t.backward().arena_bytes()});
  EXPECT_EQ(region(s, R::ARENA, 0)->bytes(), arena);
  EXPECT_EQ(region(s, R::CONSTANTS, 0)->bytes(), plan::constantsLayout(p).bytes);
  EXPECT_GT(plan::constantsLayout(p).bytes, 0);

  // Brute force: regions live at once never share bytes; all lie inside device_bytes.
  int64_t end = 0, sum = 0;
  for (const R &a : s.regions()) {
    EXPECT_EQ(a.offset() % 256, 0);
    end = std::max(end, a.offset() + a.bytes());
    sum += a.bytes();
    for (const R &b : s.regions()) {
      if (&a == &b) continue;
      bool together = a.first_action() <= b.last_action() && b.first_action() <= a.last_action();
      bool shared = a.offset() < b.offset() + b.bytes() && b.offset() < a.offset() + a.bytes();
      EXPECT_FALSE(together && shared) << plan::regionKindName(a.kind()) << " " << a.index() << " and "
                                       << plan::regionKindName(b.kind()) << " " << b.index();
    }
  }
  EXPECT_EQ(s.device_bytes(), end);
  EXPECT_LE(s.device_bytes(), sum);
}

TEST(StreamSchedule, AttentionWorkspaceIsTwoScoreMatrices) {
  frontend::ImportOptions io;
  io.batch = 2;
  io.seq = 16;
  passes::PassOptions unfused; // the fused loss's scratch would be larger here
  unfused.fuseLinearCrossEntropy = false;
  auto p = driver::compileForTraining(fixtureDir("llama_op23") + "/model.onnx", io, unfused, {});
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  int attention = 0;
  for (const plan::Template &t : p->templates())
    for (const plan::Program::Op &op : t.backward().ops()) attention += op.type() == "megac.AttentionGrad";
  ASSERT_GT(attention, 0) << "llama_op23 has no Attention op";
  // The export's Attention reads 3-D operands (fold-head-transposes) with its
  // 2 kv heads grouped (fuse-attention-gqa): B=2 x 2 kv-head units, each 2 x
  // 16 stacked query rows by 16 keys. The gradient: two fp32 score matrices
  // (2048 floats each), and its operands gathered to [B, H, S, D]: Q, Y and
  // dQ (2048 floats each), K, V, dK and dV (1024 each). Plus 32 MiB.
  const int64_t scores = 4 * 32 * 16 * 4, q = 2 * 4 * 16 * 16 * 4, kv = 2 * 2 * 16 * 16 * 4;
  const int64_t grad = 2 * scores + 3 * q + 4 * kv, forward = scores + 2 * q + 2 * kv;
  EXPECT_EQ(plan::workspaceBudgetBytes(*p), grad + (32 << 20));
  // bf16 plans add room for the bf16 copies of operands: in the gradient
  // only dO V^T's, dO (2048 elements) and V (1024); every other product's
  // copies fit in a free score matrix.
  for (const plan::Template &t : p->templates()) {
    bool hasGrad = false;
    for (const plan::Program::Op &op : t.backward().ops()) hasGrad |= op.type() == "megac.AttentionGrad";
    if (!hasGrad) continue;
    EXPECT_EQ(plan::attentionWorkspaceBytes(t.backward(), false), grad);
    EXPECT_EQ(plan::attentionWorkspaceBytes(t.backward(), true), grad + 2 * (2048 + 1024));
    // The forward: one score matrix and Q, K, V, Y gathered, then Q K^T's or
    // P V's copies (2048 + 1024 elements each).
    EXPECT_EQ(plan::attentionWorkspaceBytes(t.forward(), true), forward + 2 * (2048 + 1024));
  }
}

// From seq 64 on (plan::kMinFusedAttentionSeq), a bf16 plan runs plain causal
// attention fused (cuDNN) and budgets that path's O(B H S D) bytes; fp32
// plans still budget two materialized [B, H, S, S] score matrices.
TEST(StreamSchedule, FusedAttentionIsBudgetedItsOwnWorkspace) {
  frontend::ImportOptions io;
  io.batch = 2;
  io.seq = 256;
  passes::PassOptions unfused;
  unfused.fuseLinearCrossEntropy = false;
  auto p = driver::compileForTraining(fixtureDir("llama_op23") + "/model.onnx", io, unfused, {});
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  int checked = 0;
  for (const plan::Template &t : p->templates())
    for (const plan::Program::Op &op : t.backward().ops()) {
      if (op.type() != "megac.AttentionGrad") continue;
      // [B=2, H=4 over 2 kv heads, 256, head size 16], 3-D: the fp32 path
      // takes two score matrices (2 x 2 units, 2 x 256 rows, 256 keys) and
      // its operands gathered (Q, Y, dQ: 128 KiB each; K, V, dK, dV: 64 KiB).
      EXPECT_EQ(plan::attentionWorkspaceBytes(t.backward(), false),
                2 * (4 * 512 * 256 * 4) + 3 * 131072 + 4 * 65536);
      // Fused, its residue (bf16 Q, K, V, Y and the stats) sits in the stash:
      // the scratch holds the rest.
      EXPECT_EQ(plan::attentionWorkspaceBytes(t.backward(), true),
                plan::fusedAttentionScratchBytes(2, 4, 2, 256, 16, 16, true));
      EXPECT_EQ(plan::attentionWorkspaceBytes(t.forward(), true),
                plan::fusedAttentionScratchBytes(2, 4, 2, 256, 16, 16, false));
      ++checked;
    }
  ASSERT_GT(checked, 0) << "llama_op23 has no Attention op";
  // bf16 plans also hold the forward's residue for the gradient: bf16 Q and
  // Y (2 x 64 KiB), K and V (2 x 32 KiB) and the stats (8 KiB), past the
  // kernels' scratch.
  const int64_t stash = 2 * 65536 + 2 * 32768 + 8192;
  EXPECT_EQ(plan::attentionStashBytes(*p), 0) << "an " << p->compute() << " plan";
  plan::Plan bf16 = *p;
  bf16.set_compute("bf16");
  EXPECT_EQ(plan::attentionStashBytes(bf16), stash);
  EXPECT_EQ(plan::fusedAttentionStashBytes(2, 4, 2, 256, 16, 16), stash);
  EXPECT_EQ(plan::fusedAttentionWorkspaceBytes(2, 4, 2, 256, 16, 16, true),
            plan::fusedAttentionScratchBytes(2, 4, 2, 256, 16, 16, true) + stash);
  // The stash is counted once: the budget holds the gradient's whole
  // workspace and 32 MiB, and no second copy of the residue.
  const int64_t budget = plan::workspaceBudgetBytes(bf16);
  EXPECT_GE(budget, plan::fusedAttentionWorkspaceBytes(2, 4, 2, 256, 16, 16, true) + (32 << 20));
  EXPECT_LT(budget, plan::fusedAttentionWorkspaceBytes(2, 4, 2, 256, 16, 16, true) + stash + (32 << 20));
  // bf16 copies of Q, Y, dY, dQ (4 x 64 KiB) and K, V, dK, dV (4 x 32 KiB),
  // the stats and row sums (2 x 8 KiB), the fp32 dQ accumulator (128 KiB)
  // and cuDNN's own (one more such accumulator, 1 MiB spare): 1.6 MiB,
  // against 4 MiB of scores.
  EXPECT_EQ(plan::fusedAttentionWorkspaceBytes(2, 4, 2, 256, 16, 16, true),
            4 * 65536 + 4 * 32768 + 2 * 8192 + 131072 + 131072 + (1 << 20));
}

// Attention on materialized scores takes the query rows a chunk at a time
// where all of them would pass the score budget (4 GiB), so its scratch stays
// near that however long the sequence: Llama-3.1-8B's heads (32 over 8 kv
// heads) at batch 1 x seq 32768, in fp32, would need two 275 GB score
// matrices for the gradient.
TEST(StreamSchedule, MaterializedAttentionChunksItsRows) {
  cpu::AttentionDims d;
  d.batch = 1, d.qHeads = 32, d.kvHeads = 8, d.qSeq = d.kvSeq = d.totalSeq = 32768, d.headSize = d.vHeadSize = 128;
  // 8 units of 4 x 32768 rows; a row of two fp32 matrices is 8 x 32768 x 4 x 2 bytes (2 MiB): 2048 rows fit.
  EXPECT_EQ(plan::attentionChunkRows(8, 4 * 32768, 32768, 2), 2048);
  EXPECT_EQ(plan::materializedAttentionBytes(d, true, false), int64_t(4) << 30);
  EXPECT_EQ(plan::materializedAttentionBytes(d, false, false), int64_t(4) << 30); // 4096 rows of one matrix
  // bf16 adds one chunk's operand copies; 3-D inputs their gathered Q, K, V, dY, dQ, dK, dV.
  EXPECT_GT(plan::materializedAttentionBytes(d, true, true), int64_t(4) << 30);
  d.is3D = true;
  // Q, dY, dQ [32 heads] and K, V, dK, dV [8 heads] of 32768 x 128 floats: (3 x 32 + 4 x 8) x 16 MiB = 2 GiB.
  EXPECT_EQ(plan::materializedAttentionBytes(d, true, false), int64_t(6) << 30);
  // Short rows: all of them at once, the rounding to 64 rows only past 64.
  EXPECT_EQ(plan::attentionChunkRows(8, 100, 16, 2), 100);
  {
    plan::ScopedAttentionScoreBudget small(8 * 16 * 4 * 2 * 70);
    EXPECT_EQ(plan::attentionChunkRows(8, 100, 16, 2), 64);
  }
  {
    plan::ScopedAttentionScoreBudget tiny(100);
    EXPECT_EQ(plan::attentionChunkRows(8, 100, 16, 2), 1);
  }
}

// The WORKSPACE budget covers the fused loss's scratch in each compute mode:
// in bf16 plans W and the products' operands packed to bf16 as well.
TEST(StreamSchedule, WorkspaceCoversTheFusedLoss) {
  for (const char *compute : {"fp32", "tf32", "bf16"}) {
    frontend::ImportOptions io;
    io.batch = 4;
    io.seq = 16;
    codegen::CodegenOptions co;
    co.compute = compute;
    auto p = driver::compileForTraining(fixtureDir("gpt2") + "/model.onnx", io, {}, co);
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    const bool bf16 = std::string(compute) == "bf16";
    int fused = 0;
    for (const plan::Template &t : p->templates()) {
      for (const plan::Program::Op &op : t.forward().ops()) fused += op.type() == "megac.LinearCrossEntropy";
      for (const plan::Program::Op &op : t.backward().ops()) fused += op.type() == "megac.LinearCrossEntropyGrad";
    }
    EXPECT_EQ(fused, 2) << compute;
    // gpt2: 64 rows, hidden 64, the tied head reads wte [256, 64] as stored.
    const int64_t grad = plan::linearCrossEntropyWorkspaceBytes(true, 64, 64, 256, 0, bf16);
    const int64_t fwd = plan::linearCrossEntropyWorkspaceBytes(false, 64, 64, 256, 0, bf16);
    EXPECT_GE(plan::workspaceBudgetBytes(*p), std::max(grad, fwd) + plan::kGemmWorkspaceBytes) << compute;
    EXPECT_EQ(p->vocab(), 256);
  }
}

TEST(StreamLayout, UnitWeightLayoutPacksAligned) {
  plan::Plan p;
  plan::Unit *u = p.add_units();
  for (int64_t n : {10, 64, 1, 100}) { // 40, 256, 4, 400 bytes
    plan::Parameter *q = p.add_parameters();
    q->set_numel(n);
    u->add_parameters(p.parameters_size() - 1);
  }
  u->add_parameters(1); // a parameter bound twice is laid out twice
  plan::WeightLayout l = plan::unitWeightLayout(p, 0);
  EXPECT_EQ(l.offsets, (std::vector<int64_t>{0, 256, 512, 768, 1280}));
  EXPECT_EQ(l.bytes, 1536);
}

TEST(StreamLayout, EventNamesRoundTrip) {
  char kind;
  int slot;
  bool ready;
  EXPECT_EQ(plan::slotEventName('s', 12, false), "s12.free");
  ASSERT_TRUE(plan::parseSlotEventName("g3.ready", kind, slot, ready));
  EXPECT_EQ(kind, 'g');
  EXPECT_EQ(slot, 3);
  EXPECT_TRUE(ready);
  EXPECT_FALSE(plan::parseSlotEventName("x1.ready", kind, slot, ready));
  EXPECT_FALSE(plan::parseSlotEventName("w.free", kind, slot, ready));
  EXPECT_FALSE(plan::parseSlotEventName("w1.done", kind, slot, ready));
}
