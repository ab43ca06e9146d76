// Lifetimes and arena offsets (codegen/MemoryPlan.h): hand-made
// programs with offsets worked out by hand, and every program of the fixture
// plans against a brute-force overlap check written independently here.
#include "FixtureTestUtil.h"

#include "codegen/MemoryPlan.h"
#include "driver/Compile.h"

using namespace megac;
using namespace megac::testing;

namespace {

using Kind = plan::Program::Value::Kind;
constexpr Kind TEMP = plan::Program::Value::TEMP, ARGUMENT = plan::Program::Value::ARGUMENT,
               CONSTANT = plan::Program::Value::CONSTANT;

struct ProgramBuilder {
  plan::Program p;
  int value(const char *name, Kind kind, std::vector<int64_t> shape, plan::DType dt = plan::F32) {
    plan::Program::Value *v = p.add_values();
    v->set_name(name);
    v->set_kind(kind);
    v->mutable_type()->set_dtype(dt);
    for (int64_t d : shape) v->mutable_type()->add_shape(d);
    if (kind == ARGUMENT) p.add_arguments(p.values_size() - 1);
    return p.values_size() - 1;
  }
  void op(const char *type, std::vector<int> ins, std::vector<int> outs) {
    plan::Program::Op *o = p.add_ops();
    o->set_type(type);
    for (int i : ins) o->add_inputs(i);
    for (int i : outs) o->add_outputs(i);
  }
};

plan::ArenaPlan planOf(const plan::Program &p) {
  auto ap = plan::planArena(p);
  EXPECT_TRUE(bool(ap)) << llvm::toString(ap.takeError());
  return ap ? *ap : plan::ArenaPlan();
}

} // namespace

TEST(MemoryPlan, HandComputedOffsets) {
  ProgramBuilder b;
  int a = b.value("a", ARGUMENT, {64});
  int t1 = b.value("t1", TEMP, {64});  // 256 bytes, ops 0..2
  int t2 = b.value("t2", TEMP, {128}); // 512 bytes, ops 1..2
  int t3 = b.value("t3", TEMP, {32});  // 128 -> 256 bytes, ops 2..3
  int t4 = b.value("t4", TEMP, {320}); // 1280 bytes, ops 3..4 (a result)
  b.op("Relu", {a}, {t1});
  b.op("Relu", {t1}, {t2});
  b.op("Add", {t1, t2}, {t3});
  b.op("Relu", {t3}, {t4});
  b.p.add_results(t4);
  plan::ArenaPlan ap = planOf(b.p);
  // Largest first: t4 at 0; t2 at 0 (disjoint from t4 in time); t1 above t2
  // at 512; t3 overlaps t4, t2 and t1 in time: above t4's 1280.
  EXPECT_EQ(ap.offsets, (std::vector<int64_t>{-1, 512, 0, 1280, 0}));
  EXPECT_EQ(ap.arenaBytes, 1536);
  EXPECT_EQ(ap.sumBytes, 256 + 512 + 256 + 1280);
  // At op 3 t3 and t4 are live: 1536; at op 2 t1 + t2 + t3 = 1024.
  EXPECT_EQ(ap.lowerBound, 1536);

  auto life = plan::computeLifetimes(b.p);
  ASSERT_TRUE(bool(life));
  EXPECT_FALSE((*life)[size_t(a)].inArena);
  EXPECT_EQ((*life)[size_t(t1)].def, 0);
  EXPECT_EQ((*life)[size_t(t1)].last, 2);
  EXPECT_EQ((*life)[size_t(t4)].last, 4); // results live to the end
  EXPECT_EQ((*life)[size_t(t3)].bytes, 256);
}

TEST(MemoryPlan, ViewSharesItsInputsBytesAndExtendsItsLife) {
  ProgramBuilder b;
  int a = b.value("a", ARGUMENT, {2, 8});
  int shape = b.value("shape", CONSTANT, {1}, plan::I64);
  int t1 = b.value("t1", TEMP, {2, 8});
  int v = b.value("v", TEMP, {16});
  int t2 = b.value("t2", TEMP, {2, 8});
  int t3 = b.value("t3", TEMP, {16});
  int va = b.value("va", TEMP, {16}); // a view of the argument: its own bytes
  b.op("Relu", {a}, {t1});          // 0
  b.op("Reshape", {t1, shape}, {v}); // 1: shares t1's bytes
  b.op("Relu", {a}, {t2});          // 2
  b.op("Add", {v, t2}, {t3});       // 3: t1's buffer is live until here through v
  b.op("Reshape", {a, shape}, {va}); // 4
  b.p.add_results(t3);
  b.p.add_results(va);
  plan::ArenaPlan ap = planOf(b.p);
  EXPECT_EQ(ap.offsets[size_t(v)], ap.offsets[size_t(t1)]);
  // Buffers (all 256 bytes, placed earliest first): t1+v ops 0..3 at 0, t2
  // ops 2..3 at 256, t3 ops 3..5 at 512, va ops 4..5 reuses 0 or 256.
  EXPECT_EQ(ap.offsets[size_t(t1)], 0);
  EXPECT_EQ(ap.offsets[size_t(t2)], 256);
  EXPECT_EQ(ap.offsets[size_t(t3)], 512);
  EXPECT_EQ(ap.offsets[size_t(va)], 0);
  EXPECT_EQ(ap.offsets[size_t(a)], -1);
  EXPECT_EQ(ap.offsets[size_t(shape)], -1);
  EXPECT_EQ(ap.arenaBytes, 768);
  EXPECT_EQ(ap.sumBytes, 4 * 256); // t1 (with v), t2, t3, va
  EXPECT_EQ(ap.lowerBound, 768);
}

TEST(MemoryPlan, ResultsKeepTheirBytesToTheEnd) {
  auto build = [](bool t1IsResult) {
    ProgramBuilder b;
    int a = b.value("a", ARGUMENT, {8});
    int t1 = b.value("t1", TEMP, {8});
    int t2 = b.value("t2", TEMP, {8});
    int t3 = b.value("t3", TEMP, {8});
    b.op("Relu", {a}, {t1});  // never read by an op
    b.op("Relu", {a}, {t2});
    b.op("Relu", {t2}, {t3});
    if (t1IsResult) b.p.add_results(t1);
    b.p.add_results(t3);
    return b.p;
  };
  plan::ArenaPlan kept = planOf(build(true));
  EXPECT_EQ(kept.offsets, (std::vector<int64_t>{-1, 0, 256, 512}));
  EXPECT_EQ(kept.arenaBytes, 768);
  // Not a result: t1 dies at op 0 and t2 takes its bytes.
  plan::ArenaPlan dropped = planOf(build(false));
  EXPECT_EQ(dropped.offsets, (std::vector<int64_t>{-1, 0, 0, 256}));
  EXPECT_EQ(dropped.arenaBytes, 512);
}

TEST(MemoryPlan, MalformedProgramsAreErrors) {
  ProgramBuilder b;
  int a = b.value("a", ARGUMENT, {8});
  int t = b.value("t", TEMP, {8});
  b.op("Relu", {t}, {a}); // reads t before anything writes it
  auto ap = plan::planArena(b.p);
  ASSERT_FALSE(bool(ap));
  EXPECT_NE(llvm::toString(ap.takeError()).find("before any op writes it"), std::string::npos);
}

TEST(MemoryPlan, PlaceIntervalsReusesBytesOfDisjointLifetimes) {
  int64_t total = 0;
  std::vector<int64_t> at = plan::placeIntervals({{0, 1, 512}, {2, 3, 512}, {1, 2, 256}, {0, 3, 0}}, &total);
  // The first two never live together; the third overlaps both.
  EXPECT_EQ(at, (std::vector<int64_t>{0, 0, 512, 0}));
  EXPECT_EQ(total, 768);
}

namespace {

// Independent of MemoryPlan.cpp: lifetimes by scanning the ops, sharing
// allowed only along chains of view ops at the same offset.
void bruteForceNoOverlap(const plan::Program &p, const std::string &what) {
  const int n = p.values_size(), ops = p.ops_size();
  ASSERT_EQ(p.arena_offsets_size(), n) << what;
  std::vector<int> def(size_t(n), -1), last(size_t(n), -1), viewOf(size_t(n), -1);
  for (int k = 0; k < ops; ++k) {
    for (int in : p.ops(k).inputs())
      if (in >= 0) last[size_t(in)] = k;
    for (int out : p.ops(k).outputs())
      if (out >= 0) def[size_t(out)] = k;
    const std::string &t = p.ops(k).type();
    if ((t == "Reshape" || t == "Squeeze" || t == "Unsqueeze" || t == "Flatten" || t == "Identity") &&
        p.ops(k).inputs(0) >= 0 && p.ops(k).outputs(0) >= 0)
      viewOf[size_t(p.ops(k).outputs(0))] = p.ops(k).inputs(0);
  }
  for (int r : p.results()) last[size_t(r)] = ops;
  auto rootOf = [&](int v) {
    while (viewOf[size_t(v)] >= 0 && p.arena_offsets(viewOf[size_t(v)]) == p.arena_offsets(v)) v = viewOf[size_t(v)];
    return v;
  };
  auto bytes = [&](int v) {
    int64_t b = 4;
    switch (p.values(v).type().dtype()) {
    case plan::I64: case plan::F64: b = 8; break;
    case plan::BOOL: case plan::U8: case plan::I8: b = 1; break;
    default: break;
    }
    for (int64_t d : p.values(v).type().shape()) b *= d;
    return b;
  };
  for (int v = 0; v < n; ++v) {
    bool temp = p.values(v).kind() == plan::Program::Value::TEMP && def[size_t(v)] >= 0;
    if (!temp) {
      EXPECT_EQ(p.arena_offsets(v), -1) << what << " value " << p.values(v).name();
      continue;
    }
    EXPECT_EQ(p.arena_offsets(v) % 256, 0) << what;
    EXPECT_LE(p.arena_offsets(v) + bytes(v), p.arena_bytes()) << what;
  }
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      if (p.arena_offsets(a) < 0 || p.arena_offsets(b) < 0) continue;
      int la = std::max(last[size_t(a)], def[size_t(a)]), lb = std::max(last[size_t(b)], def[size_t(b)]);
      bool together = def[size_t(a)] <= lb && def[size_t(b)] <= la;
      bool shareBytes = p.arena_offsets(a) < p.arena_offsets(b) + bytes(b) && p.arena_offsets(b) < p.arena_offsets(a) + bytes(a);
      if (together && shareBytes) {
        EXPECT_EQ(rootOf(a), rootOf(b)) << what << ": '" << p.values(a).name() << "' and '" << p.values(b).name() << "' overlap";
      }
    }
}

} // namespace

TEST(MemoryPlan, FixturePlansAreTightAndOverlapFree) {
  for (const char *model : {"llama", "gpt2", "llama_sdpa"}) {
    frontend::ImportOptions io;
    io.batch = 2;
    io.seq = 16;
    auto p = driver::compileForTraining(fixtureDir(model) + "/model.onnx", io, {}, {});
    ASSERT_TRUE(bool(p)) << model << ": " << llvm::toString(p.takeError());
    int aliased = 0;
    for (const plan::Template &t : p->templates())
      for (const plan::Program *prog : {&t.forward(), &t.backward()}) {
        std::string what = std::string(model) + " " + t.name() + (prog == &t.forward() ? " forward" : " backward");
        plan::ArenaPlan ap = planOf(*prog);
        EXPECT_EQ(prog->arena_bytes(), ap.arenaBytes) << what;
        EXPECT_GE(ap.arenaBytes, ap.lowerBound) << what;
        EXPECT_LE(ap.arenaBytes, ap.sumBytes) << what;
        EXPECT_GT(ap.lowerBound, 0) << what;
        bruteForceNoOverlap(*prog, what);
        for (const plan::Program::Op &op : prog->ops())
          if (plan::isViewOp(op.type()) && op.inputs(0) >= 0 && op.outputs(0) >= 0 &&
              prog->arena_offsets(op.inputs(0)) >= 0 && prog->arena_offsets(op.inputs(0)) == prog->arena_offsets(op.outputs(0)))
            ++aliased;
      }
    EXPECT_GT(aliased, 0) << model << ": no view shares its input's bytes";
  }
}
