// The numbers `megac plan` reports: on a hand-built plan where every value
// is worked out by hand, and on the plan compiled from test/data/llama
// (2 layers, hidden 64, intermediate 176, 4 heads of 16, 2 KV heads, vocab 256).
#include "FixtureTestUtil.h"

#include "driver/Compile.h"
#include "tools/inspect/PlanReport.h"
#include "tools/inspect/PlanTimeline.h"

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

// handPlan with a hand-built schedule. Slot layouts (fp32, each parameter
// 256-aligned): a = tied (40 B) -> 256; b = w1 (28 B) -> 256; c = w2 (400 B)
// at 0, tied at 512 -> 768.
plan::Plan handPlanWithSchedule() {
  plan::Plan p = handPlan();
  plan::StreamSchedule &s = *p.mutable_schedule();
  s.set_weight_slots(2);
  s.set_grad_slots(2);
  s.set_weight_slot_bytes(1024);
  s.set_grad_slot_bytes(768);
  s.set_pinned_staging_bytes(2 * 768);
  s.set_device_bytes(3328);
  s.set_gpu_budget_bytes(int64_t(1) << 30);
  s.add_events("w0.ready");
  using SA = plan::StreamAction;
  for (auto [kind, stream, unit] : {std::tuple<SA::Kind, SA::Stream, int>{SA::PREFETCH, SA::H2D, 0},
                                    {SA::PREFETCH, SA::H2D, 2},
                                    {SA::OFFLOAD, SA::D2H, 1}}) {
    SA *a = s.add_actions();
    a->set_kind(kind);
    a->set_stream(stream);
    a->set_unit(unit);
  }
  s.mutable_actions(0)->add_records(0);
  s.mutable_actions(2)->add_waits(0);
  using DR = plan::DeviceRegion;
  for (auto [kind, offset, bytes] : {std::tuple<DR::Kind, int64_t, int64_t>{DR::WEIGHT_SLOT, 0, 1024},
                                     {DR::WEIGHT_SLOT, 1024, 1024},
                                     {DR::CHECKPOINT, 2048, 512},
                                     {DR::CHECKPOINT, 2048, 512},  // the same bytes, another time
                                     {DR::CHECKPOINT, 2304, 512},  // half of them
                                     {DR::ARENA, 3072, 256}}) {
    DR *r = s.add_regions();
    r->set_kind(kind);
    r->set_offset(offset);
    r->set_bytes(bytes);
    r->set_first_action(0);
    r->set_last_action(2);
  }
  return p;
}

TEST(PlanReport, Schedule) {
  plan::Plan p = handPlanWithSchedule();
  plan::MachineProfile m;
  m.description = "test machine";
  m.pcieH2dGBps = 1e-6; // 1000 bytes/s: the 1024 + 768 bytes of prefetch take 1.792 s
  m.pcieD2hGBps = 1e-6;
  m.pcieBothGBps = 2e-6;
  auto r = plan::reportPlan(p, m);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  ASSERT_TRUE(r->hasSchedule);
  const plan::ScheduleReport &s = r->schedule;
  ASSERT_EQ(s.device.size(), 13u); // every DeviceRegion::Kind
  auto category = [&](plan::DeviceRegion::Kind k) { return s.device[size_t(k)]; };
  EXPECT_EQ(category(plan::DeviceRegion::WEIGHT_SLOT).footprintBytes, 2048);
  EXPECT_EQ(category(plan::DeviceRegion::WEIGHT_SLOT).regions, 2);
  // Checkpoints: [2048, 2560) twice and [2304, 2816): 768 bytes, 1536 summed.
  EXPECT_EQ(category(plan::DeviceRegion::CHECKPOINT).footprintBytes, 768);
  EXPECT_EQ(category(plan::DeviceRegion::CHECKPOINT).sumBytes, 1536);
  EXPECT_EQ(category(plan::DeviceRegion::CHECKPOINT).regions, 3);
  EXPECT_EQ(category(plan::DeviceRegion::ARENA).footprintBytes, 256);
  EXPECT_EQ(category(plan::DeviceRegion::WORKSPACE).regions, 0);
  EXPECT_EQ(s.deviceBytes, 3328);
  // Host: 12 B x 117 parameters + 1536 of staging.
  EXPECT_EQ(s.pinnedStagingBytes, 1536);
  EXPECT_EQ(s.hostBytes, 12 * 117 + 1536);
  EXPECT_DOUBLE_EQ(s.bytesPerParameter, double(12 * 117 + 1536) / 117);
  EXPECT_EQ(s.h2dBytesPerPass, 256 + 768);
  EXPECT_EQ(s.d2hBytesPerPass, 256);
  EXPECT_EQ(s.h2dBytesPerStep, 1024);
  ASSERT_TRUE(s.predicted) << s.predictionError;
  EXPECT_EQ(s.profileName, "test machine");
  // Prefetches back to back: 0.256 s + 0.768 s; the offload waits for the
  // first (w0.ready) and runs beside the second, both at 1000 B/s (the both
  // rate is their sum): 0.256 .. 0.512.
  EXPECT_NEAR(s.prediction.stepSeconds, 1.024, 1e-9);
  EXPECT_EQ(s.prediction.bottleneck, plan::kLaneH2D);

  std::string text;
  llvm::raw_string_ostream os(text);
  plan::printPlanReport(p, *r, "x.plan", os);
  os.flush();
  for (const char *want : {"pinned gradient staging: 1536 bytes", "total:                   2940 bytes",
                           "25.1282 bytes per parameter", "checkpoints:       768 bytes", "3 regions (1536 bytes before sharing)",
                           "peak (the allocation): 3328 bytes", "host to device (weights):   1024 bytes",
                           "predicted (cost model, profile: test machine), unvalidated", "step time: 1.024 s",
                           "bottleneck: H2D"})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\nin:\n" << text;
  EXPECT_EQ(text.find("not implemented"), std::string::npos);
  EXPECT_EQ(text.find("streamed per step"), std::string::npos);

  // A compute action whose program the cost model cannot read (MatMul
  // without operands): the report stands, the prediction says why not.
  plan::StreamAction *f = p.mutable_schedule()->add_actions();
  f->set_kind(plan::StreamAction::FORWARD);
  f->set_stream(plan::StreamAction::COMPUTE);
  f->set_unit(0);
  r = plan::reportPlan(p, m);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_FALSE(r->schedule.predicted);
  EXPECT_NE(r->schedule.predictionError.find("lacks A or Y"), std::string::npos) << r->schedule.predictionError;
  std::string html;
  llvm::raw_string_ostream hs(html);
  llvm::Error e = plan::writePlanTimeline(p, *r, "x.plan", hs);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("cannot simulate"), std::string::npos);
}

TEST(PlanReport, ScheduleJson) {
  plan::Plan p = handPlanWithSchedule();
  auto r = plan::reportPlan(p);
  ASSERT_TRUE(bool(r));
  std::string s;
  llvm::raw_string_ostream os(s);
  plan::printPlanReportJson(p, *r, "x.plan", os);
  os.flush();
  auto v = llvm::json::parse(s);
  ASSERT_TRUE(bool(v)) << llvm::toString(v.takeError());
  const llvm::json::Object *o = v->getAsObject();
  const llvm::json::Object *gpu = o->getObject("gpu_memory");
  const llvm::json::Object *host = o->getObject("host_memory");
  const llvm::json::Object *moved = o->getObject("moved_per_step");
  const llvm::json::Object *pred = o->getObject("prediction");
  ASSERT_TRUE(gpu && host && moved && pred);
  EXPECT_EQ(o->getObject("streamed"), nullptr);
  const llvm::json::Object *cats = gpu->getObject("categories");
  ASSERT_TRUE(cats && cats->getObject("checkpoints") && cats->getObject("weight_slots") &&
              cats->getObject("activation_grads"));
  EXPECT_EQ(cats->getObject("checkpoints")->getInteger("bytes").getValueOr(-1), 768);
  EXPECT_EQ(cats->getObject("checkpoints")->getInteger("sum_bytes").getValueOr(-1), 1536);
  EXPECT_EQ(gpu->getObject("peak")->getInteger("bytes").getValueOr(-1), 3328);
  EXPECT_EQ(host->getObject("pinned_staging")->getInteger("bytes").getValueOr(-1), 1536);
  EXPECT_EQ(host->getObject("total")->getInteger("bytes").getValueOr(-1), 2940);
  EXPECT_EQ(moved->getObject("host_to_device")->getInteger("bytes").getValueOr(-1), 1024);
  EXPECT_EQ(moved->getObject("device_to_host")->getInteger("bytes").getValueOr(-1), 256);
  EXPECT_EQ(pred->getInteger("actions").getValueOr(-1), 3);
  EXPECT_TRUE(pred->getBoolean("available").getValueOr(false));
  ASSERT_TRUE(pred->getString("label"));
  EXPECT_NE(pred->getString("label")->str().find("unvalidated"), std::string::npos);
  EXPECT_EQ(pred->getString("bottleneck").getValueOr(""), "H2D");
  ASSERT_TRUE(pred->getObject("lane_busy_seconds"));
  // The built-in H200 profile: prefetch a (256 B) alone at its H2D rate; then
  // prefetch c (768 B) beside offload b (256 B), sharing the both-ways rate in
  // proportion to the one-way rates until the offload ends; then c alone.
  const plan::MachineProfile m;
  const double h2d = m.pcieH2dGBps * 1e9, d2h = m.pcieD2hGBps * 1e9, both = m.pcieBothGBps * 1e9;
  const double shareH = both * h2d / (h2d + d2h), shareD = both * d2h / (h2d + d2h);
  const double overlap = 256 / shareD;
  const double step = 256 / h2d + overlap + (768 - shareH * overlap) / h2d;
  EXPECT_NEAR(pred->getNumber("step_seconds").getValueOr(-1), step, 1e-18);
}

TEST(PlanReport, TimelineEscapesNames) {
  plan::Plan p = handPlanWithSchedule();
  p.mutable_units(2)->set_name("c<&\"x");
  auto r = plan::reportPlan(p);
  ASSERT_TRUE(bool(r));
  std::string html;
  llvm::raw_string_ostream os(html);
  ASSERT_FALSE(bool(plan::writePlanTimeline(p, *r, "x.plan", os)));
  os.flush();
  EXPECT_NE(html.find("data-unit=\"c&lt;&amp;&quot;x\""), std::string::npos);
  EXPECT_EQ(html.find("c<&"), std::string::npos);
  size_t bars = 0;
  for (size_t at = html.find("<rect class=\"bar "); at != std::string::npos; at = html.find("<rect class=\"bar ", at + 1))
    ++bars;
  EXPECT_EQ(bars, 3u);

  plan::Plan cpuOnly = handPlan();
  auto rc = plan::reportPlan(cpuOnly);
  ASSERT_TRUE(bool(rc));
  llvm::Error e = plan::writePlanTimeline(cpuOnly, *rc, "x.plan", os);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("no streaming schedule"), std::string::npos);
}

plan::Plan compileLlama(float clip) {
  frontend::ImportOptions io;
  io.batch = 2;
  io.seq = 16;
  codegen::CodegenOptions co;
  co.optimizer.set_lr(1e-3f);
  co.optimizer.set_grad_accum(1);
  co.optimizer.set_clip(clip);
  auto p = driver::compileForTraining(fixtureDir("llama") + "/model.onnx", io, {}, co);
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
      // 7 projections, as MatMul or (fused with their bias-free reshapes) Gemm.
      int64_t products = t.backwardOpHistogram.count("MatMul") ? t.backwardOpHistogram.at("MatMul") : 0;
      if (t.backwardOpHistogram.count("Gemm")) products += t.backwardOpHistogram.at("Gemm");
      EXPECT_GE(products, 7) << t.name;
    }
  }
  EXPECT_EQ(shared, 1);

  // Checkpoints: the hidden state [2,16,64] f32 entering each of the two
  // layers and the head (the tokens and targets are data, not checkpoints).
  EXPECT_EQ(m.checkpointBytes, 3 * 2 * 16 * 64 * 4);

  // The schedule: every unit's weights come in at least once and at most
  // twice (forward, backward), every unit's gradients go out once; all the
  // fixture's parameters are multiples of 64 floats, so the slot layouts add
  // no padding. A weight slot holds the largest unit (a layer).
  ASSERT_TRUE(r->hasSchedule);
  const plan::ScheduleReport &s = r->schedule;
  EXPECT_EQ(s.d2hBytesPerPass, 4 * 125248);
  EXPECT_GE(s.h2dBytesPerPass, 4 * 125248);
  EXPECT_LE(s.h2dBytesPerPass, 2 * 4 * 125248);
  EXPECT_EQ(s.weightSlotBytes, 4 * kLayerParams);
  const plan::DeviceCategory &slots = s.device[size_t(plan::DeviceRegion::WEIGHT_SLOT)];
  EXPECT_EQ(slots.footprintBytes, s.weightSlots * s.weightSlotBytes);
  // The allocation holds each category, and is no larger than every region
  // laid end to end.
  int64_t sumAll = 0;
  for (const plan::DeviceCategory &c : s.device) {
    EXPECT_LE(c.footprintBytes, s.deviceBytes);
    EXPECT_LE(c.footprintBytes, c.sumBytes);
    sumAll += c.sumBytes;
  }
  EXPECT_LE(s.deviceBytes, sumAll);
  EXPECT_EQ(s.hostBytes, 12 * 125248 + s.pinnedStagingBytes);
  ASSERT_TRUE(s.predicted) << s.predictionError;
  EXPECT_GT(s.prediction.stepSeconds, 0);

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
