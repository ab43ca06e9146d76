// End to end: every fixture's logits match PyTorch's, and megac's parameter
// count equals PyTorch's (tied weights counted once).
#include "FixtureTestUtil.h"

#include "ir/Eval.h"

using namespace megac;
using namespace megac::testing;

class FixtureForward : public ::testing::TestWithParam<const char *> {};

TEST_P(FixtureForward, LogitsMatchPyTorch) {
  std::string model = GetParam();
  Tensor ids = loadRef(model, "input_ids.pb");
  Tensor ref = loadRef(model, "logits.pb");
  auto g = importFixture(model, ids.shape());
  ASSERT_TRUE(g);
  auto outs = ir::runGraph(*g, {{g->value(g->inputs[0]).name, ids}});
  ASSERT_TRUE(bool(outs)) << llvm::toString(outs.takeError());
  const Tensor &logits = (*outs)[0];
  ASSERT_EQ(logits.shape(), ref.shape());
  double err = relativeError(logits, ref);
  EXPECT_LT(err, 1e-5) << model << ": relative error " << err;
}

TEST_P(FixtureForward, ParameterCountMatchesPyTorch) {
  std::string model = GetParam();
  auto g = importFixture(model, {2, 16});
  ASSERT_TRUE(g);
  int64_t params = 0;
  for (const ir::Value &v : g->values)
    if (v.kind == ir::ValueKind::Param) params += numElements(v.type.shape);
  EXPECT_EQ(params, metaInt(model, "params")) << model;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureForward, ::testing::ValuesIn(kFixtures));
