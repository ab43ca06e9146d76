// The attention stash rule (runtime/plan/AttentionStash.h): which fused
// attention gradients read their forward's Q, K and V from the stash. Their
// lifetimes end at the forward and the arena shrinks; the CPU stream executor
// (its reads checked) gives the unmarked plan's loss and gradients bit for
// bit; the checker refuses a mark the rule does not allow, and a plan whose
// arena was planned with the early ends but whose mark is gone.
#include "FixtureTestUtil.h"

#include "codegen/MemoryPlan.h"
#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/AttentionStash.h"
#include "runtime/plan/FusedAttention.h"
#include "runtime/plan/PlanChecker.h"
#include "runtime/plan/UnitPrograms.h"

using namespace megac;
using namespace megac::testing;

namespace {

constexpr int64_t kSeq = plan::kMinFusedAttentionSeq; // the shortest attention that runs fused

plan::Plan compileStash(const std::string &compute, bool stash, codegen::Recompute r = codegen::Recompute::All) {
  codegen::CodegenOptions co;
  co.compute = compute;
  co.schedule.recompute = r;
  co.schedule.residentUnits = 0;
  co.stashAttentionOperands = stash;
  return compileFixtureWith("llama", kSeq, co);
}

// Per program role (forward, backward, forward_keep, backward_kept): the
// gradients marked, and all of them.
struct Counts {
  int marked[4] = {0, 0, 0, 0}, grads[4] = {0, 0, 0, 0};
};
Counts counts(const plan::Plan &p) {
  Counts c;
  for (const plan::Template &t : p.templates()) {
    std::vector<const plan::Program *> progs = plan::templatePrograms(t);
    for (size_t r = 0; r < progs.size() && r < 4; ++r)
      for (const plan::Program::Op &op : progs[r]->ops()) {
        c.grads[r] += op.type() == "megac.AttentionGrad";
        c.marked[r] += plan::hasStashedOperands(op);
      }
  }
  return c;
}

// The first template whose backward has an AttentionGrad, and that op's index.
std::pair<plan::Template *, int> firstGrad(plan::Plan &p) {
  for (plan::Template &t : *p.mutable_templates())
    for (int k = 0; k < t.backward().ops_size(); ++k)
      if (t.backward().ops(k).type() == "megac.AttentionGrad") return {&t, k};
  return {nullptr, -1};
}

void setMark(plan::Program::Op *op, bool on) {
  auto *attrs = op->mutable_attributes();
  for (int i = 0; i < attrs->size(); ++i)
    if (attrs->Get(i).name() == plan::kStashedOperandsAttr) {
      attrs->DeleteSubrange(i, 1);
      break;
    }
  if (!on) return;
  plan::Attribute *a = op->add_attributes();
  a->set_name(plan::kStashedOperandsAttr);
  a->set_i(1);
}

std::string check(const plan::Plan &p) {
  llvm::Error e = plan::checkPlan(p);
  return e ? llvm::toString(std::move(e)) : std::string();
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(AttentionStash, MarksTheRecomputedGradientsOfBf16PlansOnly) {
  const Counts bf16 = counts(compileStash("bf16", true));
  ASSERT_GT(bf16.grads[1], 0);
  EXPECT_EQ(bf16.marked[1], bf16.grads[1]) << "each layer's gradient follows its recomputed forward";
  for (const char *compute : {"fp32", "tf32"}) {
    const Counts c = counts(compileStash(compute, true));
    EXPECT_EQ(c.marked[1], 0) << compute << ": nothing runs fused, nothing is stashed";
  }
  EXPECT_EQ(counts(compileStash("bf16", false)).marked[1], 0);
  const Counts kept = counts(compileStash("bf16", true, codegen::Recompute::None));
  ASSERT_GT(kept.grads[3], 0);
  EXPECT_EQ(kept.marked[3], 0) << "a kept unit's gradient runs after other units' forwards";
}

TEST(AttentionStash, QkvEndAtTheForwardAndTheArenaShrinks) {
  plan::Plan on = compileStash("bf16", true), off = compileStash("bf16", false);
  auto [t, g] = firstGrad(on);
  ASSERT_TRUE(t);
  const plan::Program &bwd = t->backward();
  const int f = plan::stashedGradForward(bwd, g, on.compute());
  ASSERT_GE(f, 0);
  auto life = plan::computeLifetimes(bwd);
  ASSERT_TRUE(bool(life)) << llvm::toString(life.takeError());
  for (int i = 1; i <= 3; ++i) {
    const int32_t v = bwd.ops(g).inputs(i);
    const int32_t root = (*life)[size_t(v)].root;
    ASSERT_GE(root, 0);
    EXPECT_LE((*life)[size_t(root)].last, f) << bwd.values(v).name() << " lives past its forward";
  }
  int64_t arenaOn = 0, arenaOff = 0;
  for (const plan::Template &x : on.templates()) arenaOn = std::max(arenaOn, x.backward().arena_bytes());
  for (const plan::Template &x : off.templates()) arenaOff = std::max(arenaOff, x.backward().arena_bytes());
  EXPECT_LT(arenaOn, arenaOff);
}

TEST(AttentionStash, CpuExecutorGivesTheUnmarkedGradientsBitForBit) {
  const auto [x, y] = patternBatch(kSeq);
  std::vector<float> grads[2];
  double loss[2] = {0, 0};
  for (int stash = 0; stash < 2; ++stash) {
    const plan::Plan p = compileStash("bf16", stash == 1);
    runtime::CpuOptions o;
    o.streamSchedule = true;
    o.checkReads = true; // a read of Q, K or V's bytes after their end would be caught
    auto t = withWeights(runtime::Trainer::create(p, o), p);
    ASSERT_TRUE(t);
    grads[stash].assign(t->state().params.size(), 0.0f);
    auto l = t->forwardBackward(x, y, 1.0f, &grads[stash], 0.0f);
    ASSERT_TRUE(bool(l)) << llvm::toString(l.takeError());
    loss[stash] = *l;
  }
  EXPECT_EQ(loss[1], loss[0]);
  EXPECT_EQ(grads[1], grads[0]);
}

TEST(AttentionStash, CheckerRefusesAMarkTheRuleDoesNotAllow) {
  {
    plan::Plan p = compileStash("fp32", true);
    auto [t, g] = firstGrad(p);
    ASSERT_TRUE(t);
    setMark(t->mutable_backward()->mutable_ops(g), true);
    const std::string e = check(p);
    EXPECT_CONTAINS(e, "attention stash");
    EXPECT_CONTAINS(e, "does not run fused");
  }
  {
    plan::Plan p = compileStash("bf16", true, codegen::Recompute::None);
    for (plan::Template &t : *p.mutable_templates())
      for (plan::Program::Op &op : *t.mutable_backward_kept()->mutable_ops())
        if (op.type() == "megac.AttentionGrad") setMark(&op, true);
    const std::string e = check(p);
    EXPECT_CONTAINS(e, "backward_kept");
    EXPECT_CONTAINS(e, "no Attention runs before it");
  }
  {
    // The arena planned with Q, K and V ending at the forward, the mark gone:
    // the gradient would read bytes others hold by then.
    plan::Plan p = compileStash("bf16", true);
    ASSERT_EQ(check(p), "");
    auto [t, g] = firstGrad(p);
    ASSERT_TRUE(t);
    setMark(t->mutable_backward()->mutable_ops(g), false);
    EXPECT_CONTAINS(check(p), "arena overlap");
  }
}

} // namespace
