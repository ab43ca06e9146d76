// The numbers `megac plan` reports: on a hand-built plan where every value
// is worked out by hand, and on the plan compiled from test/data/llama
// (2 layers, hidden 64, intermediate 176, 4 heads of 16, 2 KV heads, vocab 256).
#include "FixtureTestUtil.h"

#include "codegen/Compile.h"
#include "runtime/plan/PlanReport.h"

#include "llvm/Support/JSON.h"

using namespace megac;
using namespace megac::testing;

namespace {

plan::TensorType f32(std::vector<int64_t> shape) {
  plan::TensorType t;
  t.set_dtype(plan::F32);
  for (int64_t d : shape) t.add_shape(d);
  return t;
}

// Units a -> b -> c. Template 0 ("a") is used by a and b; parameter "tied"
// by a and c. Activation "h" feeds both b and c.
plan::Plan handPlan() {
  plan::Plan p;
  p.set_format_version(plan::kFormatVersion);
  p.set_batch(2);
  p.set_seq(3);
  p.set_vocab(5);
  for (int i = 0; i < 2; ++i) {
    plan::Template *t = p.add_templates();
    t->set_name(i == 0 ? "a" : "c");
    for (const char *type : {"MatMul", "Add"}) t->mutable_forward()->add_ops()->set_type(type);
    for (const char *type : {"MatMul", "MatMul", "Transpose", "Add"}) t->mutable_backward()->add_ops()->set_type(type);
    plan::Program::Value *v = t->mutable_backward()->add_values();
    v->set_kind(plan::Program::Value::CONSTANT);
    v->mutable_constant()->set_data(std::string(12, '\0'));
    v = t->mutable_backward()->add_values(); // a TEMP: not a constant
    v->mutable_constant()->set_data(std::string(100, '\0'));
  }
  auto act = [&](const char *name, plan::TensorType type, plan::Activation::Kind kind) {
    plan::Activation *a = p.add_activations();
    a->set_name(name);
    *a->mutable_type() = type;
    a->set_kind(kind);
  };
  plan::TensorType tokens;
  tokens.set_dtype(plan::I64);
  tokens.add_shape(2);
  tokens.add_shape(3);
  act("tokens", tokens, plan::Activation::DATA_TOKENS);    // 0
  act("h", f32({2, 3, 4}), plan::Activation::INTERMEDIATE); // 1: 96 bytes
  act("g", f32({2, 3, 8}), plan::Activation::INTERMEDIATE); // 2: 192 bytes
  act("loss", f32({}), plan::Activation::LOSS);             // 3
  for (auto [name, numel] : {std::pair<const char *, int64_t>{"tied", 10}, {"w1", 7}, {"w2", 100}}) {
    plan::Parameter *q = p.add_parameters();
    q->set_name(name);
    q->set_numel(numel);
  }
  auto unit = [&](const char *name, int32_t tid, std::vector<int32_t> in, std::vector<int32_t> params,
                  std::vector<int32_t> out) {
    plan::Unit *u = p.add_units();
    u->set_name(name);
    u->set_template_id(tid);
    for (int32_t a : in) u->add_activation_inputs(a);
    for (int32_t q : params) u->add_parameters(q);
    for (int32_t a : out) u->add_activation_outputs(a);
  };
  unit("a", 0, {0}, {0}, {1});
  unit("b", 0, {1}, {1}, {2});
  unit("c", 1, {1, 2}, {2, 0}, {3});
  p.mutable_optimizer()->set_grad_accum(1);
  return p;
}

TEST(PlanReport, HandBuiltPlan) {
  plan::Plan p = handPlan();
  auto r = plan::reportPlan(p);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  ASSERT_EQ(r->units.size(), 3u);
  EXPECT_EQ(r->units[0].parameters, 10);
  EXPECT_EQ(r->units[1].parameters, 7);
  EXPECT_EQ(r->units[2].parameters, 110);
  EXPECT_EQ(r->units[2].weightBytes, 440);
  ASSERT_EQ(r->templates.size(), 2u);
  EXPECT_EQ(r->templates[0].units, 2);
  EXPECT_EQ(r->templates[1].units, 1);
  EXPECT_EQ(r->templates[0].forwardOps, 2);
  EXPECT_EQ(r->templates[0].backwardOps, 4);
  EXPECT_EQ(r->templates[0].backwardOpHistogram.at("MatMul"), 2);
  EXPECT_EQ(r->templates[0].backwardOpHistogram.at("Transpose"), 1);
  EXPECT_EQ(r->templates[0].backwardOpHistogram.count("Relu"), 0u);
  EXPECT_EQ(r->templates[0].forwardConstantBytes, 0);
  EXPECT_EQ(r->templates[0].backwardConstantBytes, 12);

  const plan::MemoryReport &m = r->memory;
  EXPECT_EQ(m.parameters, 117); // the tied weight once
  EXPECT_FALSE(m.keepsGradients);
  EXPECT_EQ(m.hostBytes, 12 * 117);
  EXPECT_EQ(m.bytesPerParameter, 12);
  EXPECT_EQ(m.checkpointBytes, 96 + 192); // h once, although two units read it
  EXPECT_EQ(m.largestUnit, "c");
  EXPECT_EQ(m.largestUnitWeightBytes, 440);
  // Per unit: weights in twice, gradients out once; the tied weight per use.
  EXPECT_EQ(m.streamWeightsInBytes, 2 * 4 * (10 + 7 + 110));
  EXPECT_EQ(m.streamGradientsOutBytes, 4 * (10 + 7 + 110));
  EXPECT_EQ(m.streamBytesPerStep, 12 * 127);

  p.mutable_optimizer()->set_grad_accum(3);
  r = plan::reportPlan(p);
  ASSERT_TRUE(bool(r));
  EXPECT_TRUE(r->memory.keepsGradients);
  EXPECT_EQ(r->memory.hostBytes, 16 * 117);
  EXPECT_EQ(r->memory.gradientBytes, 4 * 117);
  EXPECT_EQ(r->memory.streamBytesPerStep, 3 * 12 * 127);
}

TEST(PlanReport, RefusesDanglingIds) {
  plan::Plan p = handPlan();
  p.mutable_units(1)->set_template_id(7);
  auto r = plan::reportPlan(p);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("template 7"), std::string::npos);
  p = handPlan();
  p.mutable_units(2)->add_parameters(3);
  r = plan::reportPlan(p);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("parameter 3"), std::string::npos);
  p = handPlan();
  p.mutable_units(0)->add_activation_outputs(-1);
  r = plan::reportPlan(p);
  ASSERT_FALSE(bool(r));
  llvm::consumeError(r.takeError());
}

plan::Plan compileLlama(float clip) {
  frontend::ImportOptions io;
  io.batch = 2;
  io.seq = 16;
  codegen::CodegenOptions co;
  co.optimizer.set_lr(1e-3f);
  co.optimizer.set_grad_accum(1);
  co.optimizer.set_clip(clip);
  auto p = codegen::compileForTraining(fixtureDir("llama") + "/model.onnx", io, {}, co);
  if (!p) {
    ADD_FAILURE() << llvm::toString(p.takeError());
    return {};
  }
  return *p;
}

// Per decoder layer: q 64x64, k and v 64x32, o 64x64, gate and up 64x176,
// down 176x64, two norm weights of 64.
constexpr int64_t kLayerParams = 4096 + 2 * 2048 + 4096 + 3 * 64 * 176 + 2 * 64;
constexpr int64_t kEmbedParams = 256 * 64;
constexpr int64_t kHeadParams = 64 + 64 * 256; // final norm, lm_head
constexpr int64_t kLlamaParams = kEmbedParams + 2 * kLayerParams + kHeadParams;
static_assert(kLlamaParams == 125248, "the fixture's parameter count");

TEST(PlanReport, LlamaFixture) {
  plan::Plan p = compileLlama(0.0f);
  auto r = plan::reportPlan(p);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  const plan::MemoryReport &m = r->memory;
  EXPECT_EQ(m.parameters, 125248);
  EXPECT_FALSE(m.keepsGradients);
  EXPECT_EQ(m.hostBytes, 12 * 125248);
  EXPECT_EQ(m.masterWeightBytes, 4 * 125248);
  EXPECT_EQ(m.adamMomentBytes, 8 * 125248);
  EXPECT_EQ(m.bytesPerParameter, 12);

  int64_t sum = 0, layers = 0;
  for (const plan::UnitReport &u : r->units) {
    sum += u.parameters;
    if (u.parameters == kLayerParams) ++layers;
  }
  EXPECT_EQ(sum, 125248); // no tied weights in this model
  EXPECT_EQ(layers, 2);
  EXPECT_EQ(m.largestUnitWeightBytes, 4 * kLayerParams);
  EXPECT_EQ(m.streamBytesPerStep, 12 * 125248);

  // The two layers share one template; its backward histogram counts every op.
  int64_t shared = 0;
  for (const plan::TemplateReport &t : r->templates) {
    int64_t n = 0;
    for (const auto &kv : t.backwardOpHistogram) n += kv.second;
    EXPECT_EQ(n, t.backwardOps) << t.name;
    EXPECT_GT(t.backwardOps, 0) << t.name;
    if (t.units == 2) {
      ++shared;
      EXPECT_GE(t.backwardOpHistogram.at("MatMul"), 7) << t.name; // 7 projections
    }
  }
  EXPECT_EQ(shared, 1);

  // Checkpoints: the hidden state [2,16,64] f32 entering each of the two
  // layers and the head (the tokens and targets are data, not checkpoints).
  EXPECT_EQ(m.checkpointBytes, 3 * 2 * 16 * 64 * 4);

  plan::Plan clipped = compileLlama(1.0f);
  auto rc = plan::reportPlan(clipped);
  ASSERT_TRUE(bool(rc));
  EXPECT_TRUE(rc->memory.keepsGradients);
  EXPECT_EQ(rc->memory.hostBytes, 16 * 125248);
  EXPECT_EQ(rc->memory.bytesPerParameter, 16);
}

TEST(PlanReport, JsonMatchesReport) {
  plan::Plan p = handPlan();
  p.mutable_optimizer()->set_lr(1e-3f);
  p.mutable_units(0)->set_name("a\xff"); // not UTF-8: must still be valid JSON
  auto r = plan::reportPlan(p);
  ASSERT_TRUE(bool(r));
  std::string s;
  llvm::raw_string_ostream os(s);
  plan::printPlanReportJson(p, *r, "x.plan", os);
  os.flush();
  auto v = llvm::json::parse(s);
  ASSERT_TRUE(bool(v)) << llvm::toString(v.takeError());
  const llvm::json::Object *o = v->getAsObject();
  ASSERT_NE(o, nullptr);
  const llvm::json::Object *host = o->getObject("host_memory");
  const llvm::json::Object *params = o->getObject("parameters");
  const llvm::json::Object *opt = o->getObject("optimizer");
  ASSERT_TRUE(host && host->getObject("total") && params && opt && o->getArray("units"));
  EXPECT_EQ(host->getObject("total")->getInteger("bytes").getValueOr(-1), 12 * 117);
  EXPECT_EQ(params->getInteger("total").getValueOr(-1), 117);
  EXPECT_EQ(opt->getNumber("lr").getValueOr(-1), 0.001);
  EXPECT_EQ(o->getArray("units")->size(), 3u);
}

} // namespace
