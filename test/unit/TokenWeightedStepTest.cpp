// The token-weighted step on the CPU backend (TokenWeightedStep.h), and the
// micro-batch weights' errors.
#include "TokenWeightedStep.h"

using namespace megac;

TEST(TokenWeightedStep, TwoMicroBatchesOfUnequalCountsMatchPyTorch) {
  megac::testing::checkTokenWeightedStep([](const plan::Plan &p) { return runtime::Trainer::create(p); }, 1e-4);
}

TEST(TokenWeightedStep, AStepThatCountsNoTargetIsAnError) {
  Tensor ids(DType::I64, {1, 4}), none(DType::I64, {1, 4});
  for (int i = 0; i < 4; ++i) ids.data<int64_t>()[i] = i, none.data<int64_t>()[i] = -100;
  auto w = runtime::microBatchWeights({{ids, none}, {ids, none}}, -100);
  ASSERT_FALSE(bool(w));
  EXPECT_NE(llvm::toString(w.takeError()).find("no token to train on"), std::string::npos);
}
