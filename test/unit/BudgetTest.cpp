// Budgets (codegen/Budget.h): the binary search for the largest size that
// fits, and the over-budget and host-memory errors of compileForTraining on
// the llama fixture.
#include "FixtureTestUtil.h"

#include "codegen/Budget.h"
#include "driver/Compile.h"
#include "runtime/plan/StreamLayout.h"

using namespace megac;
using namespace megac::testing;

TEST(Budget, LargestFittingIsABinarySearch) {
  int calls = 0;
  EXPECT_EQ(codegen::largestFitting(1000, [&](int64_t n) { ++calls; return n <= 637; }), 637);
  EXPECT_LE(calls, 11);
  EXPECT_EQ(codegen::largestFitting(10, [](int64_t) { return false; }), 0);
  EXPECT_EQ(codegen::largestFitting(10, [](int64_t) { return true; }), 9);
  EXPECT_EQ(codegen::largestFitting(1, [](int64_t) { return true; }), 0);
}

namespace {
llvm::Expected<plan::Plan> compileLlama(int64_t batch, int64_t seq, int64_t gpuBudget, int64_t hostBudget = 0,
                                        codegen::Recompute recompute = codegen::Recompute::Auto) {
  frontend::ImportOptions io;
  io.batch = batch;
  io.seq = seq;
  codegen::CodegenOptions co;
  co.schedule.gpuBudgetBytes = gpuBudget;
  co.schedule.hostBudgetBytes = hostBudget;
  co.schedule.recompute = recompute;
  return driver::compileForTraining(fixtureDir("llama") + "/model.onnx", io, {}, co);
}

// The least the plan needs: every unit recomputes (what --recompute auto
// falls back to when nothing more fits).
int64_t deviceBytes(int64_t batch, int64_t seq) {
  auto p = compileLlama(batch, seq, int64_t(1) << 40, 0, codegen::Recompute::All);
  if (!p) {
    ADD_FAILURE() << llvm::toString(p.takeError());
    return 0;
  }
  return p->schedule().device_bytes();
}
} // namespace

TEST(Budget, OverBudgetNamesTheNumbersAndWhatFits) {
  // Budget: what batch 3 x seq 16 needs. At batch 8 x seq 16 it does not fit;
  // the largest seq at batch 8 is found by the same search, checked here by
  // compiling either side of it.
  const int64_t budget = deviceBytes(3, 16);
  ASSERT_GT(deviceBytes(8, 16), budget);
  ASSERT_GT(deviceBytes(4, 16), budget);
  auto p = compileLlama(8, 16, budget);
  ASSERT_FALSE(bool(p));
  std::string m = llvm::toString(p.takeError());
  EXPECT_NE(m.find("the plan needs " + std::to_string(deviceBytes(8, 16)) + " bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("at batch 8 x seq 16; the budget (--gpu-mem) is " + std::to_string(budget) + " bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("weight slots: "), std::string::npos) << m;
  // 32 MiB for cuBLASLt and the largest op's scratch: the attention
  // gradient's (fold-head-transposes gives it 3-D operands): two fp32 score
  // matrices of 8 x 2 kv-head units, each 2 x 16 stacked query rows by 16
  // keys, and its operands gathered to [B, H, S, D]: Q, Y, dQ with 4 heads
  // and K, V, dK, dV with 2. That exceeds the fused loss's scratch (all 128
  // rows of fp32 logits [128, 256] in one chunk, each row's loss and count).
  const int64_t attentionScratch = 2 * (8 * 2 * 32 * 16 * 4) + 3 * (8 * 4 * 16 * 16 * 4) + 4 * (8 * 2 * 16 * 16 * 4);
  const int64_t lossScratch = 128 * 256 * 4 + 2 * 512;
  ASSERT_EQ(plan::linearCrossEntropyWorkspaceBytes(false, 128, 64, 256, 0, false), lossScratch);
  ASSERT_GT(attentionScratch, lossScratch);
  EXPECT_NE(m.find("workspace: " + std::to_string((32 << 20) + attentionScratch) + " bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("largest batch that fits at seq 16: 3\n"), std::string::npos) << m;
  size_t at = m.find("largest seq that fits at batch 8: ");
  ASSERT_NE(at, std::string::npos) << m;
  int64_t seq = std::stoll(m.substr(at + std::string("largest seq that fits at batch 8: ").size()));
  ASSERT_GT(seq, 0);
  EXPECT_LE(deviceBytes(8, seq), budget);
  EXPECT_GT(deviceBytes(8, seq + 1), budget);
}

TEST(Budget, NothingFits) {
  auto p = compileLlama(2, 16, 1 << 20);
  ASSERT_FALSE(bool(p));
  std::string m = llvm::toString(p.takeError());
  EXPECT_NE(m.find("largest batch that fits at seq 16: none (batch 1 does not fit)"), std::string::npos) << m;
  EXPECT_NE(m.find("largest seq that fits at batch 2: none"), std::string::npos) << m;
}

TEST(Budget, HostMemory) {
  // 125248 parameters x 12 bytes, plus 2 staging slots of one layer's 184832 bytes.
  const int64_t bill = 125248 * 12 + 2 * 184832;
  auto ok = compileLlama(2, 16, int64_t(1) << 40, bill);
  EXPECT_TRUE(bool(ok)) << llvm::toString(ok.takeError());
  auto p = compileLlama(2, 16, int64_t(1) << 40, bill - 1);
  ASSERT_FALSE(bool(p));
  std::string m = llvm::toString(p.takeError());
  EXPECT_NE(m.find("the plan needs " + std::to_string(bill) + " bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("fp32 master weights 500992, AdamW moments 1001984, step gradients 0, pinned staging 369664"),
            std::string::npos)
      << m;
}
