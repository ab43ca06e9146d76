// Attention and megac.AttentionGrad through cuDNN's fused attention (the bf16
// compute mode) against the CPU kernels: GQA and MHA, causal and not, sequence
// lengths that are and are not multiples of 64, head sizes 64 and 128, 4-D and
// 3-D layouts. Each case must have gone through cuDNN (its call counters);
// cases it does not take (a float mask, softcap, another compute mode) must
// still match, through the materialized kernels, without touching it. The
// workspace functions are checked against the cuDNN path's needs, and the
// bench shape's sizes are printed.
#include "GpuOpCheck.h"

#include "runtime/cuda/CudnnAttention.h"
#include "runtime/plan/FusedAttention.h"
#include "runtime/plan/StreamLayout.h"

#include <cstdio>

using namespace megac;
using namespace megac::gputest;
using cuda::ComputeMode;

namespace {


// bf16 rounds Q, K, V, dY and the probabilities (relative 2^-9); outputs are
// averages over keys, so their errors stay near that relative to their size.
constexpr double kTol = 2e-2;

struct Problem {
  int64_t B = 2, H = 8, KVH = 2, S = 128, D = 64;
  bool causal = false, is3D = false;
  bool floatMask = false;
  float softcap = 0;
  ComputeMode mode = ComputeMode::BF16;

  Shape q() const { return is3D ? Shape{B, S, H * D} : Shape{B, H, S, D}; }
  Shape kv() const { return is3D ? Shape{B, S, KVH * D} : Shape{B, KVH, S, D}; }
  std::string name() const {
    return "B=" + std::to_string(B) + " H=" + std::to_string(H) + " KVH=" + std::to_string(KVH) +
           " S=" + std::to_string(S) + " D=" + std::to_string(D) + (causal ? " causal" : "") + (is3D ? " 3-D" : "") +
           (floatMask ? " float mask" : "") + (softcap > 0 ? " softcap" : "") + " " + cuda::computeModeName(mode);
  }
};

Attrs attnAttrs(const Problem &p) {
  Attrs a;
  if (p.is3D) {
    a.set("q_num_heads", Attr::ofInt(p.H));
    a.set("kv_num_heads", Attr::ofInt(p.KVH));
  }
  if (p.causal) a.set("is_causal", Attr::ofInt(1));
  if (p.softcap > 0) a.set("softcap", Attr::ofFloat(p.softcap));
  return a;
}

const char *opName(bool grad) { return grad ? "megac.AttentionGrad" : "Attention"; }

// Inputs at their positions: (dY,) Q, K, V (, attn_mask).
std::vector<std::pair<DType, Shape>> inputTypes(const Problem &p, bool grad) {
  std::vector<std::pair<DType, Shape>> r;
  if (grad) r.push_back({DType::F32, p.q()});
  r.push_back({DType::F32, p.q()});
  r.push_back({DType::F32, p.kv()});
  r.push_back({DType::F32, p.kv()});
  if (p.floatMask) r.push_back({DType::F32, {p.S, p.S}});
  return r;
}

// Y (present_key/present_value unused), or dQ, dK, dV.
std::vector<std::pair<DType, Shape>> outputTypes(const Problem &p, bool grad) {
  if (grad) return {{DType::F32, p.q()}, {DType::F32, p.kv()}, {DType::F32, p.kv()}};
  return {{DType::F32, p.q()}, {DType::Undefined, {}}, {DType::Undefined, {}}};
}

OpCase makeCase(const Problem &p, bool grad, unsigned seed) {
  OpCase c;
  c.op = opName(grad);
  c.attrs = attnAttrs(p);
  const auto types = inputTypes(p, grad);
  for (size_t i = 0; i < types.size(); ++i) {
    const bool mask = p.floatMask && i + 1 == types.size(); // an additive mask in [-2, 1]
    c.inputs.push_back(randomTensor(types[i].second, seed + unsigned(i), types[i].first, mask ? -2 : -1, 1));
  }
  c.outputs = outputTypes(p, grad);
  c.mode = p.mode;
  return c;
}

OpCase forwardCase(const Problem &p, unsigned seed) { return makeCase(p, false, seed); }
OpCase gradCase(const Problem &p, unsigned seed) { return makeCase(p, true, seed); }

// The worst over the outputs of max |gpu - cpu| / max |cpu|.
double errorRelativeToMax(const OpResult &r) {
  double worst = 0;
  for (size_t o = 0; o < r.gpu.size(); ++o) {
    if (!r.gpu[o].raw()) continue;
    double maxRef = 0, maxDiff = 0;
    for (int64_t i = 0; i < r.gpu[o].numel(); ++i) {
      const double ref = r.cpu[o].getAsDouble(i), diff = std::fabs(r.gpu[o].getAsDouble(i) - ref);
      maxRef = std::max(maxRef, std::fabs(ref));
      if (!(diff <= maxDiff)) maxDiff = std::isnan(diff) ? INFINITY : diff;
    }
    worst = std::max(worst, maxDiff / std::max(maxRef, 1e-30));
  }
  return worst;
}

// Runs the case on both backends; expects a match and `viaCudnn` calls of
// cuDNN's forward (or backward, for the gradient op) to have happened.
void expectMatch(const OpCase &c, const std::string &what, bool viaCudnn) {
  SCOPED_TRACE(c.op + " " + what);
  const bool backward = c.op != "Attention";
  const cuda::CudnnAttentionStats before = cuda::cudnnAttentionStats();
  OpResult r = runOnBoth(c, gpu());
  ASSERT_TRUE(r.error.empty()) << r.error;
  const cuda::CudnnAttentionStats after = cuda::cudnnAttentionStats();
  const uint64_t calls =
      backward ? after.backwardCalls - before.backwardCalls : after.forwardCalls - before.forwardCalls;
  EXPECT_EQ(calls, viaCudnn ? 1u : 0u) << "last cuDNN fallback: " << after.lastFallback;
  EXPECT_LE(errorRelativeToMax(r), kTol);
}

#define REQUIRE_CUDNN()                                                                                          \
  do {                                                                                                           \
    if (!cuda::cudnnAttentionBuiltIn()) GTEST_SKIP() << "megac was built without cuDNN";                         \
    ASSERT_NE(gpu().get().dnn, nullptr) << "megac has cuDNN but no handle could be created (see stderr)";       \
  } while (0)

std::vector<Problem> gqaGrid() {
  std::vector<Problem> r;
  for (int64_t S : {128, 257})
    for (int64_t D : {64, 128})
      for (bool causal : {false, true}) {
        Problem p;
        p.S = S, p.D = D, p.causal = causal;
        r.push_back(p);
      }
  return r;
}

std::vector<Problem> layoutCases() {
  Problem threeD;
  threeD.S = 257, threeD.causal = true, threeD.is3D = true;
  Problem mha;
  mha.H = 4, mha.KVH = 4, mha.causal = true;
  Problem mqa;
  mqa.H = 6, mqa.KVH = 1, mqa.S = 96, mqa.D = 128, mqa.is3D = true;
  // The shortest sequences and smallest heads cuDNN is given (the fixtures' head sizes).
  Problem shortSmall;
  shortSmall.H = 4, shortSmall.KVH = 2, shortSmall.S = 64, shortSmall.D = 16, shortSmall.causal = true;
  Problem shortSmall3D = shortSmall;
  shortSmall3D.is3D = true, shortSmall3D.D = 32;
  return {threeD, mha, mqa, shortSmall, shortSmall3D};
}

TEST(CudnnAttentionGpu, ForwardGqa) {
  REQUIRE_CUDNN();
  unsigned seed = 1;
  for (const Problem &p : gqaGrid()) expectMatch(forwardCase(p, seed++), p.name(), true);
}

TEST(CudnnAttentionGpu, BackwardGqa) {
  REQUIRE_CUDNN();
  unsigned seed = 101;
  for (const Problem &p : gqaGrid()) expectMatch(gradCase(p, seed++), p.name(), true);
}

TEST(CudnnAttentionGpu, LayoutsMhaMqa) {
  REQUIRE_CUDNN();
  unsigned seed = 201;
  for (const Problem &p : layoutCases()) {
    expectMatch(forwardCase(p, seed), p.name(), true);
    expectMatch(gradCase(p, seed), p.name(), true);
    ++seed;
  }
}

// Cases cuDNN does not take go through the materialized kernels, in bf16 too.
TEST(CudnnAttentionGpu, UnsupportedCasesFallBack) {
  REQUIRE_CUDNN();
  Problem mask;
  mask.floatMask = true, mask.causal = true;
  Problem softcap;
  softcap.softcap = 2.0f, softcap.causal = true, softcap.S = 257;
  Problem fp32;
  fp32.causal = true, fp32.mode = ComputeMode::FP32;
  Problem tf32 = fp32;
  tf32.mode = ComputeMode::TF32;
  Problem oddHead;
  oddHead.D = 20; // not a multiple of 8
  unsigned seed = 301;
  for (const Problem &p : {mask, softcap, fp32, tf32, oddHead}) {
    expectMatch(forwardCase(p, seed), p.name(), false);
    expectMatch(gradCase(p, seed), p.name(), false);
    ++seed;
  }
}

// The bytes the op's workspace function asks for, from shapes alone (data
// pointers null, as GpuProgram::prepare asks, with the trainer's context).
size_t workspaceOf(const Problem &p, bool grad, cuda::GpuContext &ctx) {
  const cuda::GpuKernel *k = cuda::lookupGpuKernel(opName(grad));
  const Attrs attrs = attnAttrs(p);
  const auto inTypes = inputTypes(p, grad), outTypes = outputTypes(p, grad);
  std::vector<cuda::DeviceTensor> ins, outs;
  cuda::GpuKernelContext kc{attrs, ctx, {}, {}, {}};
  for (auto &[dt, shape] : inTypes) ins.push_back({nullptr, dt, shape});
  for (auto &[dt, shape] : outTypes) outs.push_back({nullptr, dt, shape});
  for (cuda::DeviceTensor &t : ins) {
    kc.inputs.push_back(&t);
    kc.constants.push_back(nullptr);
  }
  for (cuda::DeviceTensor &t : outs) kc.outputs.push_back(t.dtype == DType::Undefined ? nullptr : &t);
  return k->workspace(kc);
}

TEST(CudnnAttentionGpu, WorkspaceSizes) {
  REQUIRE_CUDNN();
  cuda::GpuContext &ctx = gpu().get();
  Problem p;
  p.causal = true;
  cuda::SdpaShape s;
  s.batch = p.B, s.qHeads = p.H, s.kvHeads = p.KVH, s.seq = p.S, s.headDim = s.vHeadDim = p.D;
  s.causal = true, s.scale = 1.0f / std::sqrt(float(p.D));
  ctx.mode = ComputeMode::BF16;
  const size_t fwd = workspaceOf(p, false, ctx), bwd = workspaceOf(p, true, ctx);
  EXPECT_EQ(fwd, cuda::cudnnSdpaWorkspace(ctx, s, false));
  EXPECT_EQ(bwd, cuda::cudnnSdpaWorkspace(ctx, s, true));
  EXPECT_GT(fwd, 0u);
  EXPECT_GT(bwd, fwd);
  // Without a handle (cuDNN unavailable): the materialized path's bytes, in
  // the bf16 mode with its own area for the bf16 operand copies that do not
  // fit in a free score matrix (the planner's plan::attentionPackBytes).
  cuda::GpuContext none;
  ASSERT_EQ(none.mode, ComputeMode::BF16);
  ctx.mode = ComputeMode::FP32;
  for (bool grad : {false, true})
    EXPECT_EQ(workspaceOf(p, grad, none),
              workspaceOf(p, grad, ctx) + size_t(plan::attentionPackBytes(p.B, p.H, p.KVH, p.S, p.S, p.D, p.D, grad)))
        << (grad ? "backward" : "forward");

  // The bench model's attention (Llama-shaped 2.8B, batch 8 x seq 2048) and
  // a long sequence (Llama-3.1-8B's at seq 32768): the plan runs both fused
  // (plan::runsFused) and budgets plan::fusedAttentionWorkspaceBytes for
  // them, which must hold what the cuDNN path carves, cuDNN's own workspace
  // included.
  Problem bench;
  bench.B = 8, bench.H = 24, bench.KVH = 8, bench.S = 2048, bench.D = 128, bench.causal = true;
  Problem longSeq;
  longSeq.B = 1, longSeq.H = 32, longSeq.KVH = 8, longSeq.S = 32768, longSeq.D = 128, longSeq.causal = true;
  for (const Problem &q : {bench, longSeq}) {
    ctx.mode = ComputeMode::BF16;
    const size_t cudnnFwd = workspaceOf(q, false, ctx), cudnnBwd = workspaceOf(q, true, ctx);
    ctx.mode = ComputeMode::FP32;
    const size_t matFwd = workspaceOf(q, false, ctx), matBwd = workspaceOf(q, true, ctx);
    ctx.mode = ComputeMode::BF16;
    const int64_t planFwd = plan::fusedAttentionWorkspaceBytes(q.B, q.H, q.KVH, q.S, q.D, q.D, false),
                  planBwd = plan::fusedAttentionWorkspaceBytes(q.B, q.H, q.KVH, q.S, q.D, q.D, true);
    std::printf("[ workspace ] %s: cuDNN forward %zu, backward %zu bytes (the plan budgets %lld, %lld); "
                "materialized forward %zu, backward %zu\n",
                q.name().c_str(), cudnnFwd, cudnnBwd, (long long)planFwd, (long long)planBwd, matFwd, matBwd);
    EXPECT_LE(int64_t(cudnnFwd), planFwd) << q.name();
    EXPECT_LE(int64_t(cudnnBwd), planBwd) << q.name();
    // The carved part is the plan's to the byte; only cuDNN's own may differ.
    EXPECT_GE(int64_t(cudnnFwd), plan::fusedAttentionWorkspaceBytes(q.B, q.H, q.KVH, q.S, q.D, q.D, false, 0));
    EXPECT_GE(int64_t(cudnnBwd), plan::fusedAttentionWorkspaceBytes(q.B, q.H, q.KVH, q.S, q.D, q.D, true, 0));
    EXPECT_LT(cudnnFwd, matFwd);
    EXPECT_LT(cudnnBwd, matBwd);
    // With a stash that holds the residue (a bf16 plan's), the scratch needs
    // the rest: plan::fusedAttentionScratchBytes, cuDNN's own part apart.
    const size_t stash = size_t(plan::fusedAttentionStashBytes(q.B, q.H, q.KVH, q.S, q.D, q.D));
    ctx.attentionStashBytes = stash;
    const size_t scratchFwd = workspaceOf(q, false, ctx), scratchBwd = workspaceOf(q, true, ctx);
    ctx.attentionStashBytes = 0;
    EXPECT_EQ(cudnnFwd - scratchFwd, stash) << q.name();
    EXPECT_EQ(cudnnBwd - scratchBwd, stash) << q.name();
    EXPECT_LE(int64_t(scratchBwd), plan::fusedAttentionScratchBytes(q.B, q.H, q.KVH, q.S, q.D, q.D, true)) << q.name();
  }
}

// A gradient after a forward of the same Q, K, V in the same program run
// takes the forward's bf16 copies, O and stats from the stash instead of
// running its own forward: the same computation, so the same bits. Another
// source, or another run, runs its own.
TEST(CudnnAttentionGpu, GradientTakesTheStashedForward) {
  REQUIRE_CUDNN();
  cuda::GpuContext &ctx = gpu().get();
  ctx.mode = ComputeMode::BF16;
  Problem p;
  p.causal = true, p.S = 256;
  cuda::SdpaShape s;
  s.batch = p.B, s.qHeads = p.H, s.kvHeads = p.KVH, s.seq = p.S, s.headDim = s.vHeadDim = p.D;
  s.causal = true, s.scale = 1.0f / std::sqrt(float(p.D));
  const size_t qn = size_t(p.B * p.H * p.S * p.D), kvn = size_t(p.B * p.KVH * p.S * p.D);
  const size_t wsBytes = cuda::cudnnSdpaWorkspace(ctx, s, true);
  const size_t stashBytes = size_t(plan::fusedAttentionStashBytes(p.B, p.H, p.KVH, p.S, p.D, p.D));
  ASSERT_GT(wsBytes, 0u);
  std::vector<void *> owned;
  auto device = [&](size_t bytes) {
    void *d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
    owned.push_back(d);
    return d;
  };
  auto upload = [&](const Tensor &t) {
    void *d = device(t.nbytes());
    EXPECT_EQ(cudaMemcpy(d, t.raw(), t.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    return static_cast<float *>(d);
  };
  float *q = upload(randomTensor({int64_t(qn)}, 11)), *k = upload(randomTensor({int64_t(kvn)}, 12)),
        *v = upload(randomTensor({int64_t(kvn)}, 13)), *dy = upload(randomTensor({int64_t(qn)}, 14));
  float *y = static_cast<float *>(device(qn * 4));
  void *ws = device(wsBytes), *stash = device(stashBytes);
  auto grads = [&](const cuda::SdpaSource *source) {
    std::vector<float> out(qn + 2 * kvn);
    float *dq = static_cast<float *>(device(qn * 4)), *dk = static_cast<float *>(device(kvn * 4)),
          *dv = static_cast<float *>(device(kvn * 4));
    auto ran = cuda::cudnnSdpaBackward(ctx, s, dy, q, k, v, dq, dk, dv, ws, wsBytes, source);
    EXPECT_TRUE(ran && *ran);
    if (!ran) llvm::consumeError(ran.takeError());
    EXPECT_EQ(cudaStreamSynchronize(ctx.stream), cudaSuccess);
    cudaMemcpy(out.data(), dq, qn * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(out.data() + qn, dk, kvn * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(out.data() + qn + kvn, dv, kvn * 4, cudaMemcpyDeviceToHost);
    return out;
  };
  auto stashed = [] { return cuda::cudnnAttentionStats().stashedBackwardCalls; };

  const std::vector<float> own = grads(nullptr); // no stash: its own forward
  ctx.attentionStash = stash, ctx.attentionStashBytes = stashBytes;
  ++ctx.programRun;
  int tq = 0, tk = 0, tv = 0, other = 0; // the identities of a run's values
  const cuda::SdpaSource source{&tq, &tk, &tv}, otherK{&tq, &other, &tv};
  auto fwd = cuda::cudnnSdpaForward(ctx, s, q, k, v, y, ws, wsBytes, &source);
  ASSERT_TRUE(fwd && *fwd);
  uint64_t before = stashed();
  EXPECT_EQ(grads(&source), own);
  EXPECT_EQ(stashed(), before + 1) << "the gradient ran its own forward";
  before = stashed();
  EXPECT_EQ(grads(&otherK), own);
  EXPECT_EQ(stashed(), before) << "another K took the stash";
  // That gradient ran its own forward into the stash, over the first one's:
  // the first source's gradient may not take it any more.
  EXPECT_EQ(grads(&source), own);
  EXPECT_EQ(stashed(), before) << "a gradient took a stash another gradient overwrote";
  ++ctx.programRun;
  EXPECT_EQ(grads(&source), own);
  EXPECT_EQ(stashed(), before) << "a later run took the stash";
  ctx.attentionStash = nullptr, ctx.attentionStashBytes = 0;
  for (void *d : owned) cudaFree(d);
}

} // namespace
