// fuse-attention keeps every fixture's function: the logits with the pass
// equal those without it (the unfused graph computes attention through
// separate MatMul/Softmax ops, the fused one through the Attention kernel),
// and each fixture's attention became one Attention op per layer. Small
// hand-written graphs (GQA, K^T transposed straight from [B, S, H, D], the
// sdpa sqrt-scale form under the NaN guard, kept and inverted masks) give the
// same outputs on random inputs before and after the rewrite.
#include "FixtureTestUtil.h"

#include "ir/Eval.h"
#include "ir/Parser.h"

#include <random>

using namespace megac;
using namespace megac::testing;

namespace {

int countOps(const ir::Graph &g, llvm::StringRef type) {
  int n = 0;
  for (const ir::Op &op : g.ops) n += !op.dead && op.type == type;
  return n;
}

std::vector<std::string> pipelineWithoutFusion() {
  std::vector<std::string> p;
  for (const std::string &name : passes::importPipeline())
    if (name != "fuse-attention") p.push_back(name);
  return p;
}


Tensor logitsOf(ir::Graph &g, const Tensor &ids) {
  auto outs = ir::runGraph(g, {{g.value(g.inputs[0]).name, ids}});
  if (!outs) {
    ADD_FAILURE() << llvm::toString(outs.takeError());
    return Tensor();
  }
  return (*outs)[0];
}

class FuseAttentionFixture : public ::testing::TestWithParam<const char *> {};

TEST_P(FuseAttentionFixture, FusesOneAttentionPerLayer) {
  std::string model = GetParam();
  auto before = importFixture(model, {2, 16}, pipelineWithoutFusion());
  auto after = importFixture(model, {2, 16}, passes::importPipeline());
  ASSERT_TRUE(before && after);
  const int64_t layers = layersOf(model);
  ASSERT_GT(layers, 0);
  // llama_op23 was exported with Attention already.
  EXPECT_EQ(countOps(*before, "Softmax") + countOps(*before, "Attention"), layers) << model;
  EXPECT_EQ(countOps(*after, "Attention"), layers) << model;
  EXPECT_EQ(countOps(*after, "Softmax"), 0) << model;
  if (model == "llama_op23")
    EXPECT_EQ(after->ops.size(), before->ops.size());
  else
    EXPECT_LT(after->ops.size(), before->ops.size()) << model;
}

TEST_P(FuseAttentionFixture, LogitsEqualUnfused) {
  std::string model = GetParam();
  Tensor ref = loadRef(model, "input_ids.pb");
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> token(0, 255);
  Tensor odd(DType::I64, {3, 9});
  for (int64_t i = 0; i < odd.numel(); ++i) odd.data<int64_t>()[i] = token(rng);
  for (const Tensor &ids : {ref, odd}) {
    auto before = importFixture(model, ids.shape(), pipelineWithoutFusion());
    auto after = importFixture(model, ids.shape(), passes::importPipeline());
    ASSERT_TRUE(before && after);
    Tensor unfused = logitsOf(*before, ids), fused = logitsOf(*after, ids);
    ASSERT_EQ(fused.shape(), unfused.shape());
    double err = maxRelativeDiff(fused, unfused);
    EXPECT_LT(err, 1e-5) << model << " at " << shapeToString(ids.shape()) << ": max relative difference " << err;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FuseAttentionFixture, ::testing::ValuesIn(kFixtures));

// Each output is one attention written as separate ops.
const char *const kPatterns = R"(
graph @patterns opset 20 {
  %q = input f32[2,4,5,3]
  %k = input f32[2,2,5,3]
  %v = input f32[2,2,5,3]
  %kbshd = input f32[2,5,4,3]
  %v4 = input f32[2,4,5,3]
  %ax2 = const i64[1] dense<[2]>
  %shape5 = const i64[5] dense<[2, 2, 2, 5, 3]>
  %shape4 = const i64[4] dense<[2, 4, 5, 3]>
  %flat = const i64[3] dense<[8, 5, 3]>
  %back = const i64[4] dense<[2, 4, 3, 5]>
  %root = const f32[] dense<0.7>
  %div = const f32[] dense<1.7320508>
  %zero = const f32[] dense<0>
  %lowest = const f32[] dense<-3.4028235e+38>
  %causal = const f32[2,1,5,5] dense<[0, -inf, -inf, -inf, -inf, 0, 0, -inf, -inf, -inf, 0, 0, 0, -inf, -inf, 0, 0, 0, 0, -inf, 0, 0, 0, 0, 0, 0, -3.4028235e+38, -3.4028235e+38, -3.4028235e+38, -3.4028235e+38, 0, 0, -3.4028235e+38, -3.4028235e+38, -3.4028235e+38, 0, 0, 0, -3.4028235e+38, -3.4028235e+38, 0, 0, 0, 0, -3.4028235e+38, 0, 0, 0, 0, 0]>
  %holey = const f32[5,5] dense<[0, 0.5, -inf, -inf, -1, -inf, -inf, -inf, -inf, -inf, 0, 0, 0, -inf, -inf, 2, 0, 0, 0, -inf, 0, 0, 0, 0, 0]>
  %drop = const bool[1,4,1,5] dense<[0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1]>

  // GQA through repeat_kv, Div scale, causal mask (-inf, then lowest, per batch row).
  %ku = Unsqueeze(%k, %ax2) : f32[2,2,1,5,3]
  %ke = Expand(%ku, %shape5) : f32[2,2,2,5,3]
  %kr = Reshape(%ke, %shape4) : f32[2,4,5,3]
  %vu = Unsqueeze(%v, %ax2) : f32[2,2,1,5,3]
  %ve = Expand(%vu, %shape5) : f32[2,2,2,5,3]
  %vr = Reshape(%ve, %shape4) : f32[2,4,5,3]
  %kt1 = Transpose(%kr) {perm = ints[0, 1, 3, 2]} : f32[2,4,3,5]
  %s1 = MatMul(%q, %kt1) : f32[2,4,5,5]
  %x1 = Div(%s1, %div) : f32[2,4,5,5]
  %m1 = Add(%x1, %causal) : f32[2,4,5,5]
  %p1 = Softmax(%m1) {axis = -1} : f32[2,4,5,5]
  %y1 = MatMul(%p1, %vr) : f32[2,4,5,3]

  // GPT-2's K^T straight from [B, S, H, D]; an inverted bool mask per head.
  %kt2 = Transpose(%kbshd) {perm = ints[0, 2, 3, 1]} : f32[2,4,3,5]
  %s2 = MatMul(%q, %kt2) : f32[2,4,5,5]
  %x2 = Mul(%s2, %root) : f32[2,4,5,5]
  %m2 = Where(%drop, %lowest, %x2) : f32[2,4,5,5]
  %p2 = Softmax(%m2) {axis = -1} : f32[2,4,5,5]
  %y2 = MatMul(%p2, %v4) : f32[2,4,5,3]

  // sdpa: sqrt(scale) on Q and on K^T (batched transpose between reshapes),
  // a constant mask with a fully masked row under the NaN guard.
  %qs = Mul(%q, %root) : f32[2,4,5,3]
  %kf = Reshape(%kr, %flat) : f32[8,5,3]
  %kft = Transpose(%kf) {perm = ints[0, 2, 1]} : f32[8,3,5]
  %kt3 = Reshape(%kft, %back) : f32[2,4,3,5]
  %kts = Mul(%root, %kt3) : f32[2,4,3,5]
  %s3 = MatMul(%qs, %kts) : f32[2,4,5,5]
  %m3 = Add(%holey, %s3) : f32[2,4,5,5]
  %p3 = Softmax(%m3) {axis = -1} : f32[2,4,5,5]
  %n3 = IsNaN(%p3) : bool[2,4,5,5]
  %g3 = Where(%n3, %zero, %p3) : f32[2,4,5,5]
  %y3 = MatMul(%g3, %vr) : f32[2,4,5,3]

  return %y1, %y2, %y3
}
)";

TEST(FuseAttention, PatternsKeepTheirValues) {
  auto before = ir::parseGraph(kPatterns, "patterns.mir");
  auto after = ir::parseGraph(kPatterns, "patterns.mir");
  ASSERT_TRUE(bool(before) && bool(after)) << "parse error";
  ASSERT_FALSE(bool(passes::runPass(**after, "fuse-attention", {})));
  EXPECT_EQ(countOps(**after, "Attention"), 3);
  EXPECT_EQ(countOps(**after, "Softmax"), 0);
  EXPECT_EQ(countOps(**after, "Expand"), 0) << "GQA should use the un-repeated K and V";

  expectSameValuesOnRandomInputs(**before, **after, 3, 1e-5);
}

} // namespace
