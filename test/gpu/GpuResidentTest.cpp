// Resident units (codegen/ResidentPolicy.h) where their state crosses between
// the GPU and the host: steps that keep their gradients (--clip) and run
// AdamW on the host for every unit, and a checkpoint and resume. The
// per-step match of their GPU AdamW against the host's is GpuTrainTest's
// *_resident* cases.
#include "GpuTrainerUtil.h"

#include "llvm/Support/FileSystem.h"


using namespace megac;
using namespace megac::testing;

namespace {

// With --clip the step keeps every gradient, clips by the global norm and
// updates on the host: a resident unit's gradients are read back, its state
// comes back from the GPU first and goes to it again before the next step.
// The first moment is linear in the clipped gradient, so it shows that both
// plans clip and update the same gradients (to the GPU's rounding).
TEST(GpuResident, ClippedStepsMatchTheStreamingPlan) {
  const float clip = 0.05f; // below these fixtures' gradient norm: every step clips
  plan::Plan streamed = compileFixturePlan("llama", "fp32", codegen::Recompute::All, 16, 0, clip);
  // Two resident units; then two streamed units whose AdamW runs on the GPU
  // (with --clip their gradients are read back and their slots written back unchanged).
  for (auto [resident, gpuAdamw] : {std::pair<int, int>{2, 0}, {0, 2}}) {
    SCOPED_TRACE("resident " + std::to_string(resident) + ", AdamW on the GPU " + std::to_string(gpuAdamw));
    plan::Plan other = compileFixturePlan("llama", "fp32", codegen::Recompute::All, 16, resident, clip, gpuAdamw);
    ASSERT_TRUE(resident ? other.units(0).resident() && other.units(1).resident() && !other.units(2).resident()
                         : other.units(0).adamw_on_gpu() && other.units(1).adamw_on_gpu() && !other.units(2).adamw_on_gpu());
    auto a = gpuTrainer(streamed), b = gpuTrainer(other);
    ASSERT_TRUE(a && b);
    Tensor ids = loadRef("llama", "input_ids.pb"), targets = loadRef("llama", "targets.pb");
    for (int s = 0; s < 3; ++s) {
      auto la = a->step({{ids, targets}}, 1e-2f), lb = b->step({{ids, targets}}, 1e-2f);
      ASSERT_TRUE(bool(la)) << llvm::toString(la.takeError());
      ASSERT_TRUE(bool(lb)) << llvm::toString(lb.takeError());
      EXPECT_GT(la->gradNorm, clip);
      EXPECT_NEAR(lb->gradNorm, la->gradNorm, 1e-5 * la->gradNorm) << "step " << s + 1;
      EXPECT_NEAR(lb->loss, la->loss, 1e-5 * std::abs(la->loss)) << "step " << s + 1;
    }
    const runtime::HostState &sa = a->currentState(), &sb = b->currentState();
    EXPECT_EQ(sa.step, sb.step);
    for (const plan::Parameter &pp : streamed.parameters()) {
      EXPECT_LT(paramError(sb.m, sa.m, pp), 1e-4) << pp.name() << " first moment";
      EXPECT_LT(paramError(sb.params, sa.params, pp), 1e-3) << pp.name();
    }
  }
}

// Six steps with a checkpoint every two equal three, a checkpoint, a resume
// and three more, with embed and layer.0 stepping on the GPU: a checkpoint
// holds their state as of its step, not the host arrays' stale copy, writing
// one leaves the run's GPU state alone, and the resumed run sends it to the
// GPU. (GPU sums need not be bitwise repeatable: to 1e-5 here; a stale unit
// is off by its updates, far more.)
TEST(GpuResident, ResumeContinuesFromTheGpuState) {
  plan::Plan p = compileFixturePlan("llama", "fp32", codegen::Recompute::All, 16, 2);
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("megac-gpu-resume", dir));
  std::string text = std::string(dir) + "/data.txt";
  writeTrainingText(text);
  auto run = [&](int64_t steps, const std::string &ckpt, const std::string &resume, int64_t every = 0) {
    auto t = quietCudaTrainer(p);
    EXPECT_TRUE(bool(t)) << (t ? "" : llvm::toString(t.takeError()));
    std::vector<double> losses = trainOnText(**t, text, steps, ckpt, resume, every);
    return std::make_pair(std::move(*t), losses);
  };
  auto [straight, lossesA] = run(6, std::string(dir) + "/every2", "", 2);
  std::string ck = std::string(dir) + "/ck";
  auto [first, lossesB1] = run(3, ck, "");
  auto [second, lossesB2] = run(6, "", ck);
  ASSERT_EQ(lossesA.size(), 6u);
  ASSERT_EQ(lossesB1.size(), 3u);
  ASSERT_EQ(lossesB2.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(lossesA[i], lossesB1[i], 1e-5 * lossesA[i]) << "step " << i + 1;
    EXPECT_NEAR(lossesA[3 + i], lossesB2[i], 1e-5 * lossesA[3 + i]) << "step " << i + 4;
  }
  const runtime::HostState &a = straight->currentState(), &b = second->currentState();
  EXPECT_EQ(a.step, b.step);
  for (const plan::Parameter &pp : p.parameters()) {
    EXPECT_LT(paramError(b.params, a.params, pp), 1e-4) << pp.name();
    EXPECT_LT(paramError(b.m, a.m, pp), 1e-4) << pp.name() << " first moment";
  }
  llvm::sys::fs::remove_directories(dir);
}

} // namespace
