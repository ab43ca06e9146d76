// fuse-rmsnorm, fuse-swiglu, fuse-gelu and fuse-rotary keep every fixture's
// function: the logits with the fusions equal those without (at the
// reference shape and at an odd one, where the rotary caches are other
// constants), and each fixture's chains became the expected fused ops with
// nothing decomposed left. Hand-written chains in the forms the lit tests
// cover give the same outputs on random inputs before and after.
#include "FixtureTestUtil.h"

#include "ir/Eval.h"
#include "ir/Parser.h"

#include <random>

using namespace megac;
using namespace megac::testing;

namespace {

const char *const kFusions[] = {"fuse-rmsnorm", "fuse-swiglu", "fuse-gelu", "fuse-rotary"};

int countOps(const ir::Graph &g, llvm::StringRef type) {
  int n = 0;
  for (const ir::Op &op : g.ops) n += !op.dead && op.type == type;
  return n;
}

std::vector<std::string> pipelineWithoutFusions() {
  std::vector<std::string> p;
  for (const std::string &name : passes::importPipeline())
    if (std::find(std::begin(kFusions), std::end(kFusions), name) == std::end(kFusions)) p.push_back(name);
  return p;
}


class FuseElementwiseFixture : public ::testing::TestWithParam<const char *> {};

TEST_P(FuseElementwiseFixture, FusesEveryChain) {
  std::string model = GetParam();
  auto g = importFixture(model, {2, 16}, passes::importPipeline());
  ASSERT_TRUE(g);
  const int64_t layers = layersOf(model);
  ASSERT_GT(layers, 0);
  if (model.rfind("gpt2", 0) == 0) {
    EXPECT_EQ(countOps(*g, "Gelu"), layers);
  } else {
    EXPECT_EQ(countOps(*g, "RMSNormalization"), 2 * layers + 1) << model;
    EXPECT_EQ(countOps(*g, "megac.SwiGLU"), layers) << model;
    EXPECT_EQ(countOps(*g, "RotaryEmbedding"), 2 * layers) << model;
  }
  for (const char *op : {"Pow", "ReduceMean", "Sqrt", "Reciprocal", "Sigmoid", "Tanh", "Neg", "Concat", "Mul"})
    EXPECT_EQ(countOps(*g, op), 0) << model << ": " << op << " left";
}

TEST_P(FuseElementwiseFixture, LogitsEqualUnfused) {
  std::string model = GetParam();
  Tensor ref = loadRef(model, "input_ids.pb");
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> token(0, 255);
  Tensor odd(DType::I64, {3, 9});
  for (int64_t i = 0; i < odd.numel(); ++i) odd.data<int64_t>()[i] = token(rng);
  for (const Tensor &ids : {ref, odd}) {
    auto before = importFixture(model, ids.shape(), pipelineWithoutFusions());
    auto after = importFixture(model, ids.shape(), passes::importPipeline());
    ASSERT_TRUE(before && after);
    EXPECT_LT(after->ops.size(), before->ops.size()) << model;
    auto want = ir::runGraph(*before, {{before->value(before->inputs[0]).name, ids}});
    auto got = ir::runGraph(*after, {{after->value(after->inputs[0]).name, ids}});
    ASSERT_TRUE(bool(want)) << llvm::toString(want.takeError());
    ASSERT_TRUE(bool(got)) << llvm::toString(got.takeError());
    ASSERT_EQ((*got)[0].shape(), (*want)[0].shape());
    double err = maxRelativeDiff((*got)[0], (*want)[0]);
    EXPECT_LT(err, 1e-5) << model << " at " << shapeToString(ids.shape()) << ": max relative difference " << err;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FuseElementwiseFixture, ::testing::ValuesIn(kFixtures));

// Each output is one chain written as separate ops.
const char *const kPatterns = R"(
graph @patterns opset 20 {
  %x = input f32[2,3,8]
  %w = input f32[8]
  %u = input f32[2,3,8]
  %q = input f32[2,2,3,4]
  %two = const f32[] dense<2>
  %three = const f32[] dense<3>
  %half = const f32[] dense<0.5>
  %one = const f32[] dense<1>
  %eps = const f32[] dense<1e-06>
  %c = const f32[] dense<0.044714998453855515>
  %k = const f32[] dense<0.7978845834732056>
  %sqrt2 = const f32[] dense<1.4142135623730951>
  %last = const i64[1] dense<[-1]>
  %i0 = const i64[1] dense<[0]>
  %i1 = const i64[1] dense<[1]>
  %i2 = const i64[1] dense<[2]>
  %i3 = const i64[1] dense<[3]>
  %big = const i64[1] dense<[9223372036854775807]>
  %cos = const f32[1,1,3,4] dense<[1, 0.5, 1, 0.5, 0.25, -2, 0.25, -2, 0.3, 0.4, 0.3, 0.4]>
  %sin = const f32[1,1,3,4] dense<[0, 0.5, 0, 0.5, 0.75, -1, 0.75, -1, 0.5, 0.6, 0.5, 0.6]>

  %p1 = Mul(%x, %x) : f32[2,3,8]
  %m1 = ReduceMean(%p1, %last) : f32[2,3,1]
  %a1 = Add(%eps, %m1) : f32[2,3,1]
  %s1 = Sqrt(%a1) : f32[2,3,1]
  %n1 = Div(%x, %s1) : f32[2,3,8]
  %y1 = Mul(%n1, %w) : f32[2,3,8]

  %sg = Sigmoid(%x) : f32[2,3,8]
  %silu = Mul(%sg, %x) : f32[2,3,8]
  %y2 = Mul(%u, %silu) : f32[2,3,8]

  %hx3 = Mul(%x, %half) : f32[2,3,8]
  %cube3 = Pow(%x, %three) : f32[2,3,8]
  %cc3 = Mul(%cube3, %c) : f32[2,3,8]
  %in3 = Add(%x, %cc3) : f32[2,3,8]
  %kin3 = Mul(%in3, %k) : f32[2,3,8]
  %t3 = Tanh(%kin3) : f32[2,3,8]
  %s3 = Add(%t3, %one) : f32[2,3,8]
  %y3 = Mul(%hx3, %s3) : f32[2,3,8]

  %d4 = Div(%u, %sqrt2) : f32[2,3,8]
  %e4 = Erf(%d4) : f32[2,3,8]
  %s4 = Add(%one, %e4) : f32[2,3,8]
  %us4 = Mul(%u, %s4) : f32[2,3,8]
  %y4 = Mul(%us4, %half) : f32[2,3,8]

  %qc = Mul(%q, %cos) : f32[2,2,3,4]
  %q1 = Slice(%q, %i0, %i2, %i3, %i1) : f32[2,2,3,2]
  %q2 = Slice(%q, %i2, %big, %i3, %i1) : f32[2,2,3,2]
  %nq2 = Neg(%q2) : f32[2,2,3,2]
  %rq = Concat(%nq2, %q1) {axis = -1} : f32[2,2,3,4]
  %qs = Mul(%rq, %sin) : f32[2,2,3,4]
  %y5 = Add(%qs, %qc) : f32[2,2,3,4]

  return %y1, %y2, %y3, %y4, %y5
}
)";

TEST(FuseElementwise, PatternsKeepTheirValues) {
  auto before = ir::parseGraph(kPatterns, "patterns.mir");
  auto after = ir::parseGraph(kPatterns, "patterns.mir");
  ASSERT_TRUE(bool(before) && bool(after)) << "parse error";
  for (const char *pass : kFusions) ASSERT_FALSE(bool(passes::runPass(**after, pass, {}))) << pass;
  EXPECT_EQ(countOps(**after, "RMSNormalization"), 1);
  EXPECT_EQ(countOps(**after, "megac.SwiGLU"), 1);
  EXPECT_EQ(countOps(**after, "Gelu"), 2);
  EXPECT_EQ(countOps(**after, "RotaryEmbedding"), 1);
  EXPECT_EQ((*after)->ops.size(), 5u);

  expectSameValuesOnRandomInputs(**before, **after, 5, 1e-6);
}

} // namespace
