// CUDA megac.LinearCrossEntropy and megac.LinearCrossEntropyGrad against the
// CPU kernels (fp32) in each compute mode: several chunks (chunk_rows), the
// last one short, trans_w, ignored and all-ignored targets, int32 targets;
// bitwise-reproducible results; and the workspace the planner budgets.
#include "RowOpsTestUtil.h"

#include "runtime/plan/StreamLayout.h"

#include <cstring>

namespace megac::gputest {
namespace {

using cuda::ComputeMode;

// |gpu - cpu| / (1 + |cpu|): h in [-1, 1], W in [-1, 1] / sqrt(H), so logits
// are O(1) and their rounding does not grow with H (as MatMulGpuTest).
double tolFor(ComputeMode m) {
  switch (m) {
  case ComputeMode::FP32: return 2e-5;
  case ComputeMode::TF32: return 5e-3;
  case ComputeMode::BF16: return 3e-2;
  }
  return 0;
}

const ComputeMode kModes[] = {ComputeMode::FP32, ComputeMode::TF32, ComputeMode::BF16};

struct Head {
  int64_t rows, hidden, vocab, chunkRows = 0;
  bool transW = false;
  int64_t ignoreEvery = 0; // every n-th target ignored (1: all)
  DType targetType = DType::I64;
};

struct Inputs {
  Tensor h, w, targets;
};

Inputs inputsFor(const Head &s, unsigned seed) {
  Inputs in;
  in.h = randomTensor({s.rows / 2, 2, s.hidden}, seed, DType::F32, -1, 1);
  const double r = 1.0 / std::sqrt(double(std::max<int64_t>(s.hidden, 1)));
  in.w = randomTensor(s.transW ? Shape{s.vocab, s.hidden} : Shape{s.hidden, s.vocab}, seed + 1, DType::F32, -r, r);
  Tensor t = randomTensor({s.rows / 2, 2}, seed + 2, DType::I64, 0, double(s.vocab));
  if (s.ignoreEvery > 0)
    for (int64_t i = 0; i < t.numel(); i += s.ignoreEvery) t.data<int64_t>()[i] = -100;
  in.targets = convertTo(t, s.targetType);
  return in;
}

Attrs attrsFor(const Head &s) {
  Attrs a = makeAttrs({{"ignore_index", Attr::ofInt(-100)}, {"trans_w", Attr::ofInt(s.transW)}});
  if (s.chunkRows) a.set("chunk_rows", Attr::ofInt(s.chunkRows));
  return a;
}

OpCase forwardCase(const Head &s, const Inputs &in, ComputeMode mode) {
  OpCase c;
  c.op = "megac.LinearCrossEntropy";
  c.attrs = attrsFor(s);
  c.inputs = {in.h, in.w, in.targets};
  c.outputs = {{DType::F32, {}}};
  c.mode = mode;
  return c;
}

OpCase gradCase(const Head &s, const Inputs &in, ComputeMode mode) {
  OpCase c;
  c.op = "megac.LinearCrossEntropyGrad";
  c.attrs = attrsFor(s);
  c.inputs = {Tensor::scalar(0.8f), in.h, in.w, in.targets};
  c.outputs = {{DType::F32, in.h.shape()}, {DType::F32, in.w.shape()}};
  c.mode = mode;
  return c;
}

void expectHead(const Head &s, ComputeMode mode, unsigned seed = 1) {
  SCOPED_TRACE("rows " + std::to_string(s.rows) + " H=" + std::to_string(s.hidden) + " V=" + std::to_string(s.vocab) +
               " chunk " + std::to_string(s.chunkRows) + (s.transW ? " trans_w " : " ") + cuda::computeModeName(mode));
  Inputs in = inputsFor(s, seed);
  EXPECT_GPU_MATCHES_CPU(forwardCase(s, in, mode), gpu(), tolFor(mode));
  EXPECT_GPU_MATCHES_CPU(gradCase(s, in, mode), gpu(), tolFor(mode));
}

TEST(LinearCrossEntropyGpu, ChunksInEachMode) {
  for (ComputeMode m : kModes) {
    expectHead({20, 16, 37, 0}, m);          // one chunk
    expectHead({20, 16, 37, 6}, m);          // 6 + 6 + 6 + 2 rows
    expectHead({20, 16, 37, 6, true}, m);    // W [V, H]
    expectHead({22, 64, 1001, 1, false, 3}, m); // one row per chunk, ignored targets
  }
}

// Larger products, several chunks: in BF16 mode W is packed once and each
// chunk's operands are packed by ltMatmul.
TEST(LinearCrossEntropyGpu, PackedBf16Products) {
  for (ComputeMode m : kModes) {
    expectHead({128, 256, 4099, 64}, m, 2);
    expectHead({128, 256, 4099, 64, true, 5}, m, 3);
  }
}

TEST(LinearCrossEntropyGpu, EverythingIgnoredGivesZero) {
  for (ComputeMode m : kModes) expectHead({12, 8, 50, 5, false, 1}, m);
}

TEST(LinearCrossEntropyGpu, Int32Targets) {
  expectHead({16, 32, 300, 7, false, 4, DType::I32}, ComputeMode::FP32);
  expectHead({16, 32, 300, 7, true, 4, DType::I32}, ComputeMode::BF16);
}

TEST(LinearCrossEntropyGpu, LargeVocabularyAutomaticChunks) {
  // 64 MiB of logits is 130 rows of 128256: three chunks, the last short.
  expectHead({300, 64, 128256}, ComputeMode::TF32, 4);
}

TEST(LinearCrossEntropyGpu, BitwiseReproducible) {
  const Head s{64, 32, 999, 10, false, 7};
  Inputs in = inputsFor(s, 5);
  for (const OpCase &c : {forwardCase(s, in, ComputeMode::BF16), gradCase(s, in, ComputeMode::BF16)}) {
    GpuOnlyResult a = runGpuOnly(c, gpu()), b = runGpuOnly(c, gpu());
    ASSERT_TRUE(a.error.empty()) << a.error;
    ASSERT_TRUE(b.error.empty()) << b.error;
    for (size_t o = 0; o < a.outputs.size(); ++o)
      EXPECT_EQ(std::memcmp(a.outputs[o].raw(), b.outputs[o].raw(), a.outputs[o].nbytes()), 0) << c.op << " output " << o;
  }
}

// The kernels ask exactly what the planner budgets for the op (StreamLayout.h).
TEST(LinearCrossEntropyGpu, WorkspaceIsThePlannersFormula) {
  const cuda::GpuKernel *fwd = cuda::lookupGpuKernel("megac.LinearCrossEntropy");
  const cuda::GpuKernel *bwd = cuda::lookupGpuKernel("megac.LinearCrossEntropyGrad");
  ASSERT_TRUE(fwd && fwd->workspace && bwd && bwd->workspace);
  cuda::DeviceTensor dloss{nullptr, DType::F32, {}}, h{nullptr, DType::F32, {4, 50, 64}},
      w{nullptr, DType::F32, {64, 3000}}, t{nullptr, DType::I64, {4, 50}};
  for (ComputeMode m : kModes) {
    gpu().get().mode = m;
    Attrs a = makeAttrs({{"chunk_rows", Attr::ofInt(30)}});
    cuda::GpuKernelContext f{a, gpu().get(), {&h, &w, &t}, {}, {}};
    cuda::GpuKernelContext g{a, gpu().get(), {&dloss, &h, &w, &t}, {}, {}};
    const bool bf16 = m == ComputeMode::BF16;
    EXPECT_EQ(int64_t(fwd->workspace(f)), plan::linearCrossEntropyWorkspaceBytes(false, 200, 64, 3000, 30, bf16));
    EXPECT_EQ(int64_t(bwd->workspace(g)), plan::linearCrossEntropyWorkspaceBytes(true, 200, 64, 3000, 30, bf16));
  }
}

TEST(LinearCrossEntropyGpu, RejectsMismatchedShapes) {
  OpCase c;
  c.op = "megac.LinearCrossEntropy";
  c.inputs = {randomTensor({4, 8}, 1), randomTensor({7, 5}, 2), int64s({4}, {0, 1, 2, 3})};
  c.outputs = {{DType::F32, {}}};
  GpuOnlyResult r = runGpuOnly(c, gpu());
  EXPECT_NE(r.error.find("hidden size"), std::string::npos) << r.error;
}

} // namespace
} // namespace megac::gputest
