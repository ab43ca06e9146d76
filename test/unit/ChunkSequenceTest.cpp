// chunk-sequence (passes/ChunkSequence.cpp): a unit's MLP block run over
// slices of the sequence gives the unchunked block's loss and gradients
// (the weights' gradients as sums of the slices' partial products: another
// summation order), on every fixture, on the direct CPU path and through
// the CPU stream executor; and its arena shrinks.
#include "FixtureTestUtil.h"

#include "driver/Compile.h"

using namespace megac;
using namespace megac::testing;

namespace {

plan::Plan compileChunked(const std::string &model, int64_t chunks, int64_t seq = 16) {
  frontend::ImportOptions io;
  io.batch = 2;
  io.seq = seq;
  passes::PassOptions po;
  po.sequenceChunks = chunks;
  codegen::CodegenOptions co;
  co.compute = "fp32";
  co.schedule.residentUnits = 0;
  auto p = driver::compileForTraining(fixtureDir(model) + "/model.onnx", io, po, co);
  if (!p) {
    ADD_FAILURE() << llvm::toString(p.takeError());
    return {};
  }
  return *p;
}

// The ops of the plan's templates that run on a slice (megac.chunk).
int chunkOps(const plan::Plan &p) {
  int n = 0;
  for (const plan::Template &t : p.templates())
    for (const plan::Program::Op &op : t.forward().ops())
      for (const plan::Attribute &a : op.attributes()) n += a.name() == "megac.chunk";
  return n;
}

struct Gradients {
  double loss = 0;
  std::vector<float> grads;
};

Gradients gradients(const plan::Plan &p, const std::string &model, bool streamed) {
  runtime::CpuOptions o;
  o.streamSchedule = streamed;
  o.checkReads = streamed;
  auto t = withWeights(runtime::Trainer::create(p, o), p);
  Gradients g;
  if (!t) return g;
  g.grads.assign(t->state().params.size(), 0.0f);
  auto l = t->forwardBackward(loadRef(model, "input_ids.pb"), loadRef(model, "targets.pb"), 1.0f, &g.grads, 0.0f);
  if (!l) ADD_FAILURE() << llvm::toString(l.takeError());
  else g.loss = *l;
  return g;
}

class ChunkSequence : public ::testing::TestWithParam<const char *> {};

TEST_P(ChunkSequence, ChunkedMlpGradientsEqualTheUnchunkedOnes) {
  const std::string model = GetParam();
  const plan::Plan whole = compileChunked(model, 1);
  ASSERT_EQ(chunkOps(whole), 0);
  const Gradients want = gradients(whole, model, false);
  for (int64_t k : {2, 4}) {
    SCOPED_TRACE(model + ", " + std::to_string(k) + " chunks");
    const plan::Plan p = compileChunked(model, k);
    ASSERT_GT(chunkOps(p), 0) << "no MLP block was chunked";
    for (bool streamed : {false, true}) {
      const Gradients got = gradients(p, model, streamed);
      EXPECT_NEAR(got.loss, want.loss, 1e-6 * std::abs(want.loss)) << (streamed ? "streamed" : "direct");
      for (const plan::Parameter &q : p.parameters())
        EXPECT_LT(paramError(got.grads, want.grads, q), 1e-5) << q.name() << (streamed ? ", streamed" : ", direct");
    }
  }
}

// What the GPU test (GpuChunkSequence) runs, on the CPU: one forward and
// backward, then 3 AdamW steps on the same trainer; every step trains, and
// the chunked losses follow the whole blocks' (summation order apart).
TEST_P(ChunkSequence, TrainsAfterAForwardBackward) {
  const std::string model = GetParam();
  for (bool streamed : {false, true}) {
    std::vector<double> losses[2];
    for (int chunked = 0; chunked < 2; ++chunked) {
      SCOPED_TRACE(model + (chunked ? ", 4 chunks" : ", whole") + (streamed ? ", streamed" : ", direct"));
      const plan::Plan p = compileChunked(model, chunked ? 4 : 1);
      runtime::CpuOptions o;
      o.streamSchedule = streamed;
      o.checkReads = streamed;
      auto t = withWeights(runtime::Trainer::create(p, o), p);
      ASSERT_TRUE(t);
      std::vector<float> grads(t->state().params.size(), 0.0f);
      auto l = t->forwardBackward(loadRef(model, "input_ids.pb"), loadRef(model, "targets.pb"), 1.0f, &grads, 0.0f);
      ASSERT_TRUE(bool(l)) << llvm::toString(l.takeError());
      const auto mbs = fixtureMicroBatches(model, p.ignore_index(), 1);
      for (int s = 0; s < 3; ++s) {
        auto st = t->step(mbs, 1e-2f);
        ASSERT_TRUE(bool(st)) << "step " << s + 1 << ": " << llvm::toString(st.takeError());
        losses[chunked].push_back(st->loss);
      }
    }
    for (size_t i = 0; i < losses[0].size(); ++i)
      EXPECT_NEAR(losses[1][i], losses[0][i], 1e-4 * std::abs(losses[0][i])) << "step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChunkSequence,
                         ::testing::Values("llama", "llama_noopt", "llama_sdpa", "llama_op23", "gpt2", "gpt2_noopt",
                                           "llama_small"));

// At a long sequence the chunks' intermediates take a K-th of the block's
// memory: the arena of llama_small at 4,096 tokens shrinks with K.
TEST(ChunkSequence, TheArenaShrinksWithTheChunks) {
  int64_t previous = INT64_MAX;
  for (int64_t k : {1, 4, 16}) {
    const plan::Plan p = compileChunked("llama_small", k, 4096);
    ASSERT_TRUE(p.has_schedule());
    int64_t arena = 0;
    for (const plan::DeviceRegion &r : p.schedule().regions())
      if (r.kind() == plan::DeviceRegion::ARENA) arena = r.bytes();
    EXPECT_LT(arena, previous) << k << " chunks";
    previous = arena;
  }
}

} // namespace
