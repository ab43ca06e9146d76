// The recompute policy (codegen/RecomputePolicy.h) and the keep programs
// (codegen/KeepPrograms.h): keeping a unit's activations gives the same
// gradients as recomputing them, bit for bit on the CPU backend; the policy
// keeps what the budget holds, best first; the checker guards SAVED regions.
#include "FixtureTestUtil.h"

#include "codegen/RecomputePolicy.h"
#include "runtime/plan/PlanChecker.h"
#include "runtime/plan/UnitPrograms.h"
#include "runtime/train/Trainer.h"
#include "runtime/train/Weights.h"
#include "runtime/weights/WeightFiles.h"

using namespace megac;
using namespace megac::testing;

namespace {

int keptUnits(const plan::Plan &p) {
  int n = 0;
  for (const plan::Unit &u : p.units()) n += u.keep_activations();
  return n;
}

std::vector<float> gradients(const plan::Plan &p, const std::string &model, double *loss) {
  auto t = runtime::Trainer::create(p);
  if (!t) {
    ADD_FAILURE() << llvm::toString(t.takeError());
    return {};
  }
  auto w = runtime::loadInitialWeights(p, (*t)->state(), {}, runtime::fileWeightReaders());
  if (!w) {
    ADD_FAILURE() << llvm::toString(w.takeError());
    return {};
  }
  std::vector<float> g(size_t((*t)->hostParamElements()), 0.0f);
  auto l = (*t)->forwardBackward(loadRef(model, "input_ids.pb"), loadRef(model, "targets.pb"), 1.0f, &g, 0.0f);
  if (!l) {
    ADD_FAILURE() << llvm::toString(l.takeError());
    return {};
  }
  *loss = *l;
  return g;
}

class KeepPrograms : public ::testing::TestWithParam<const char *> {};

TEST_P(KeepPrograms, KeepingGivesTheGradientsOfRecomputing) {
  std::string model = GetParam();
  plan::Plan recompute = compileFixturePlan(model, "fp32", codegen::Recompute::All);
  plan::Plan keep = compileFixturePlan(model, "fp32", codegen::Recompute::None);
  ASSERT_GT(keep.units_size(), 0);
  EXPECT_EQ(keptUnits(recompute), 0);
  // Every unit whose backward recomputes something keeps: the layers and the head at least.
  EXPECT_GE(keptUnits(keep), keep.units_size() - 1) << model;
  for (const plan::Template &t : recompute.templates()) EXPECT_FALSE(plan::hasKeepPrograms(t));
  for (int u = 0; u < keep.units_size(); ++u) {
    if (!keep.units(u).keep_activations()) continue;
    const plan::Template &t = keep.templates(keep.units(u).template_id());
    ASSERT_TRUE(plan::hasKeepPrograms(t));
    // No recomputation: fewer ops than the backward that recomputes.
    EXPECT_LT(t.backward_kept().ops_size(), t.backward().ops_size()) << t.name();
    EXPECT_GT(plan::savedLayout(t).bytes, 0) << t.name();
  }
  double lossR = 0, lossK = 0;
  std::vector<float> gr = gradients(recompute, model, &lossR), gk = gradients(keep, model, &lossK);
  ASSERT_EQ(gr.size(), gk.size());
  EXPECT_EQ(lossR, lossK);
  size_t differ = 0;
  for (size_t i = 0; i < gr.size(); ++i) differ += gr[i] != gk[i];
  EXPECT_EQ(differ, 0u) << model << ": gradients differ between keeping and recomputing";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KeepPrograms, ::testing::ValuesIn(kFixtures));

plan::Plan llamaWithBudget(int64_t budget, codegen::Recompute r = codegen::Recompute::Auto) {
  codegen::ScheduleOptions so;
  so.gpuBudgetBytes = budget;
  so.recompute = r;
  return compileFixtureScheduled("llama", so);
}

TEST(RecomputePolicy, KeepsWhatTheBudgetHoldsBestFirst) {
  const int64_t base = llamaWithBudget(int64_t(1) << 40, codegen::Recompute::All).schedule().device_bytes();
  const plan::Plan all = llamaWithBudget(int64_t(1) << 40, codegen::Recompute::None);
  const int64_t full = all.schedule().device_bytes();
  ASSERT_GT(full, base);
  // Enough for everything; then just the base (nothing kept); then between.
  EXPECT_EQ(keptUnits(llamaWithBudget(full * 100 / 96)), keptUnits(all));
  plan::Plan tight = llamaWithBudget(base + 1); // holds the plan, not 3% of headroom beyond it
  EXPECT_EQ(keptUnits(tight), 0);
  EXPECT_FALSE(llvm::errorToBool(plan::checkPlan(tight)));
  int64_t middle = (base + full) / 2 / 97 * 100;
  plan::Plan some = llamaWithBudget(middle);
  EXPECT_GT(keptUnits(some), 0);
  EXPECT_LT(keptUnits(some), keptUnits(all));
  EXPECT_LE(some.schedule().device_bytes(), middle / 100 * 97);
  EXPECT_FALSE(llvm::errorToBool(plan::checkPlan(some)));
  // The two layers save the same bytes for the same work: the later one is kept first.
  if (keptUnits(some) == 1 && !some.units(3).keep_activations()) {
    EXPECT_TRUE(some.units(2).keep_activations());
  }
}

TEST(RecomputePolicy, ParsesItsFlag) {
  EXPECT_EQ(*codegen::parseRecompute("auto"), codegen::Recompute::Auto);
  EXPECT_EQ(*codegen::parseRecompute("all"), codegen::Recompute::All);
  EXPECT_EQ(*codegen::parseRecompute("none"), codegen::Recompute::None);
  auto bad = codegen::parseRecompute("some");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("--recompute"), std::string::npos);
}

std::string check(const plan::Plan &p) {
  llvm::Error e = plan::checkPlan(p);
  return e ? llvm::toString(std::move(e)) : std::string();
}

plan::DeviceRegion *savedRegion(plan::Plan &p, int unit) {
  for (plan::DeviceRegion &r : *p.mutable_schedule()->mutable_regions())
    if (r.kind() == plan::DeviceRegion::SAVED && r.index() == unit) return &r;
  return nullptr;
}

TEST(RecomputePolicy, CheckerCatchesBrokenSavedRegions) {
  const plan::Plan good = llamaWithBudget(int64_t(1) << 40, codegen::Recompute::None);
  ASSERT_EQ(check(good), "");
  {
    plan::Plan p = good; // freed before the backward reads it
    plan::DeviceRegion *r = savedRegion(p, 1);
    ASSERT_TRUE(r);
    r->set_last_action(r->last_action() - 1);
    EXPECT_NE(check(p).find("region lifetime"), std::string::npos) << check(p);
  }
  {
    plan::Plan p = good; // too small for the saved values
    savedRegion(p, 1)->set_bytes(savedRegion(p, 1)->bytes() - 256);
    EXPECT_NE(check(p).find("region size"), std::string::npos) << check(p);
  }
  {
    plan::Plan p = good; // no region for the unit (it names another)
    savedRegion(p, 1)->set_index(99);
    EXPECT_NE(check(p).find("malformed plan"), std::string::npos) << check(p);
  }
  {
    plan::Plan p = good; // a keeping unit whose template lost its keep programs
    p.mutable_templates(p.units(1).template_id())->clear_backward_kept();
    EXPECT_NE(check(p).find("no keep programs"), std::string::npos) << check(p);
  }
  {
    plan::Plan p = good; // backward_kept reads one saved value fewer than forward_keep writes
    plan::Template &t = *p.mutable_templates(p.units(1).template_id());
    t.mutable_backward_kept()->mutable_arguments()->RemoveLast();
    EXPECT_NE(check(p).find("backward_kept takes"), std::string::npos) << check(p);
  }
}

} // namespace
