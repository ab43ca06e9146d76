// megac.LinearCrossEntropy[Grad] on the CPU: the chunked kernels against the
// unfused MatMul + megac.SoftmaxCrossEntropy[Grad] kernels (any chunking,
// trans_w, ignored and all-ignored targets), the gradient rule against
// float64 finite differences, and the chunk size.
#include "GradTestUtil.h"

#include "runtime/cpu/Kernel.h"
#include "runtime/plan/StreamLayout.h"

#include <random>

using namespace megac;
using namespace megac::testing;
using namespace megac::testing::grad;

namespace {

Tensor randomF32(Shape s, uint32_t seed, double scale = 1) { return randomTensor(DType::F32, std::move(s), seed, -scale, scale); }

Tensor transpose2d(const Tensor &w) {
  Tensor t(w.dtype(), {w.dim(1), w.dim(0)});
  for (int64_t i = 0; i < w.dim(0); ++i)
    for (int64_t j = 0; j < w.dim(1); ++j) t.setFromDouble(j * w.dim(0) + i, w.getAsDouble(i * w.dim(1) + j));
  return t;
}

Tensor run1(llvm::StringRef op, const Attrs &a, std::vector<const Tensor *> ins, std::vector<Tensor> outs,
            size_t which = 0, std::vector<Tensor> *all = nullptr) {
  cpu::KernelContext c{a, std::move(ins), {}};
  for (Tensor &t : outs) c.outputs.push_back(&t);
  if (auto e = cpu::runKernel(op, c)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return {};
  }
  if (all) *all = outs;
  return outs[which];
}

double maxRelDiff(const Tensor &a, const Tensor &b) {
  double worst = 0, scale = 1e-6;
  for (int64_t i = 0; i < b.numel(); ++i) scale = std::max(scale, std::abs(b.getAsDouble(i)));
  for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::abs(a.getAsDouble(i) - b.getAsDouble(i)));
  return worst / scale;
}

struct Case {
  int64_t b, s, hidden, vocab, chunkRows; // chunkRows 0: automatic
  bool transW;
  int ignoreEvery; // 0: no ignored target; 1: every target ignored
};

class LinearCrossEntropyKernels : public ::testing::TestWithParam<Case> {};

TEST_P(LinearCrossEntropyKernels, MatchUnfusedKernels) {
  const Case k = GetParam();
  const int64_t rows = k.b * k.s;
  Tensor h = randomF32({k.b, k.s, k.hidden}, 11, 2.0);
  Tensor w = randomF32(k.transW ? Shape{k.vocab, k.hidden} : Shape{k.hidden, k.vocab}, 12, 0.5);
  Tensor targets(DType::I64, {k.b, k.s});
  std::mt19937 rng(13);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = int64_t(rng() % uint32_t(k.vocab));
    if (k.ignoreEvery && r % k.ignoreEvery == 0) t = -100;
    targets.data<int64_t>()[r] = t;
  }
  Attrs a;
  a.set("ignore_index", Attr::ofInt(-100));
  a.set("trans_w", Attr::ofInt(k.transW));
  if (k.chunkRows) a.set("chunk_rows", Attr::ofInt(k.chunkRows));
  Tensor dloss = Tensor::fromVector<float>(DType::F32, {}, {0.75f});

  // Unfused: logits = h W, then the loss ops; dh = dl W^T, dW = h^T dl.
  Tensor wHV = k.transW ? transpose2d(w) : w;
  Attrs none;
  Tensor logits = run1("MatMul", none, {&h, &wHV}, {Tensor(DType::F32, {k.b, k.s, k.vocab})});
  Tensor refLoss = run1("megac.SoftmaxCrossEntropy", a, {&logits, &targets}, {Tensor(DType::F32, {})});
  Tensor dl = run1("megac.SoftmaxCrossEntropyGrad", a, {&dloss, &logits, &targets},
                   {Tensor(DType::F32, {k.b, k.s, k.vocab})});
  Tensor wT = transpose2d(wHV);
  Tensor refDh = run1("MatMul", none, {&dl, &wT}, {Tensor(DType::F32, {k.b, k.s, k.hidden})});
  Tensor h2 = h.reshaped({rows, k.hidden}), dl2 = dl.reshaped({rows, k.vocab});
  Tensor hT = transpose2d(h2);
  Tensor refDwHV = run1("MatMul", none, {&hT, &dl2}, {Tensor(DType::F32, {k.hidden, k.vocab})});
  Tensor refDw = k.transW ? transpose2d(refDwHV) : refDwHV;

  Tensor loss = run1("megac.LinearCrossEntropy", a, {&h, &w, &targets}, {Tensor(DType::F32, {})});
  std::vector<Tensor> g;
  run1("megac.LinearCrossEntropyGrad", a, {&dloss, &h, &w, &targets},
       {Tensor(DType::F32, h.shape()), Tensor(DType::F32, w.shape())}, 0, &g);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_NEAR(loss.getAsDouble(0), refLoss.getAsDouble(0), 1e-5 * std::max(1.0, std::abs(refLoss.getAsDouble(0))));
  EXPECT_LT(maxRelDiff(g[0], refDh), 1e-5);
  EXPECT_LT(maxRelDiff(g[1], refDw), 1e-5);
  if (k.ignoreEvery == 1) {
    EXPECT_EQ(loss.getAsDouble(0), 0.0);
    for (const Tensor &t : g)
      for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.getAsDouble(i), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearCrossEntropyKernels,
    ::testing::Values(Case{2, 5, 8, 37, 0, false, 0},   // one automatic chunk
                      Case{2, 5, 8, 37, 3, false, 0},   // chunks of 3 rows, the last one short
                      Case{2, 5, 8, 37, 3, true, 0},    // trans_w: W [V, H]
                      Case{3, 7, 16, 101, 1, false, 4}, // one row per chunk, ignored targets
                      Case{3, 7, 16, 101, 5, true, 3},
                      Case{1, 9, 5, 13, 4, false, 1},   // every target ignored
                      Case{1, 9, 5, 13, 100, true, 1},  // a chunk larger than the rows
                      Case{4, 33, 48, 257, 16, false, 5}));

TEST(LinearCrossEntropyGrad, MatchesFiniteDifferences) {
  Tensor targets = Tensor::fromVector<int64_t>(DType::I64, {2, 3}, {4, 0, -100, 2, 6, 1});
  for (int transW : {0, 1})
    for (int chunk : {0, 2, 4}) {
      Attrs a = attrs({{"ignore_index", I(-100)}, {"trans_w", I(transW)}});
      if (chunk) a.set("chunk_rows", Attr::ofInt(chunk));
      Shape w = transW ? Shape{7, 5} : Shape{5, 7};
      EXPECT_LT(gradCheck("megac.LinearCrossEntropy", {in({2, 3, 5}, 41, -2, 2), in(w, 42), fixed(targets)}, a), kTol)
          << "trans_w " << transW << " chunk " << chunk;
    }
  // A custom ignore_index and a 2-D h.
  Tensor t2 = Tensor::fromVector<int64_t>(DType::I64, {4}, {1, 3, 0, 3});
  EXPECT_LT(gradCheck("megac.LinearCrossEntropy", {in({4, 3}, 43), in({3, 6}, 44), fixed(t2)},
                      attrs({{"ignore_index", I(3)}, {"chunk_rows", I(3)}})),
            kTol);
  EXPECT_LT(f32VersusF64("megac.LinearCrossEntropy", {in({2, 3, 5}, 41), in({5, 7}, 42), fixed(targets)},
                         attrs({{"chunk_rows", I(4)}})),
            1e-5);
}

TEST(LinearCrossEntropy, RejectsTargetsOutsideTheVocabulary) {
  Tensor h = randomF32({2, 4}, 1), w = randomF32({4, 3}, 2);
  Tensor t = Tensor::fromVector<int64_t>(DType::I64, {2}, {1, 3});
  Tensor out(DType::F32, {});
  Attrs a;
  cpu::KernelContext c{a, {&h, &w, &t}, {&out}};
  llvm::Error e = cpu::runKernel("megac.LinearCrossEntropy", c);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("outside the vocabulary"), std::string::npos);
}

TEST(LinearCrossEntropy, ChunkRowsBoundTheLogits) {
  // 64 MiB of fp32 logits, but at least 1024 rows where they take under 1 GiB
  // (513 MB at 128256 tokens), at least one row.
  EXPECT_EQ(plan::linearCrossEntropyChunkRows(49152, 128256), 1024);
  EXPECT_EQ(plan::linearCrossEntropyChunkRows(49152, 8000), (int64_t(64) << 20) / (4 * 8000));
  EXPECT_EQ(plan::linearCrossEntropyChunkRows(49152, 1 << 20), 256); // 1 GiB / 4 MiB per row
  EXPECT_EQ(plan::linearCrossEntropyChunkRows(10, 256), 10);
  EXPECT_EQ(plan::linearCrossEntropyChunkRows(10, int64_t(1) << 30), 1);
  EXPECT_EQ(plan::linearCrossEntropyChunkRows(10, 256, 3), 3);
  EXPECT_EQ(plan::linearCrossEntropyChunkRows(0, 256), 1);
}

} // namespace
