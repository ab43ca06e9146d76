// Finite-difference checks of the NN and loss gradient rules
// (passes/autodiff/NNGrads.cpp, LossGrads.cpp) and their fused kernels, plus
// f32 runs of the same rules compared with f64.
#include "GradTestUtil.h"

#include <cmath>
#include <limits>

using namespace megac;
using namespace megac::testing;

using namespace megac::testing::grad;

namespace {

Tensor int64s(Shape shape, std::vector<int64_t> v) { return Tensor::fromVector<int64_t>(DType::I64, shape, v); }
Attr F(float v) { return Attr::ofFloat(v); }

// --- MatMul ---

struct MatMulCase {
  Shape a, b;
};

class MatMulGrad : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(MatMulGrad, MatchesFiniteDifferences) {
  const MatMulCase &mc = GetParam();
  EXPECT_LT(gradCheck("MatMul", {in(mc.a, 1), in(mc.b, 2)}), kTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatMulGrad,
                         ::testing::Values(MatMulCase{{3, 4}, {4, 5}},           // plain
                                           MatMulCase{{2, 3, 4}, {4, 5}},        // weight: flattened rows
                                           MatMulCase{{4}, {4, 5}},              // vector x matrix
                                           MatMulCase{{3, 4}, {4}},              // matrix x vector
                                           MatMulCase{{4}, {4}},                 // dot product
                                           MatMulCase{{2, 3, 4}, {4}},           // batched x vector
                                           MatMulCase{{2, 1, 3, 4}, {3, 4, 5}},  // both batches broadcast
                                           MatMulCase{{3, 4}, {2, 4, 5}},        // matrix x batch
                                           MatMulCase{{4}, {2, 4, 5}},           // vector x batch
                                           MatMulCase{{2, 3, 3, 4}, {2, 3, 4, 2}}, // attention-like
                                           MatMulCase{{1, 3, 4}, {2, 4, 5}}));

TEST(MatMulGrad, OnlyOneOperandDifferentiated) {
  EXPECT_LT(gradCheck("MatMul", {fixed(in({2, 3, 4}, 1).value), in({4, 5}, 2)}), kTol);
  EXPECT_LT(gradCheck("MatMul", {in({2, 3, 4}, 1), fixed(in({2, 4, 5}, 2).value)}), kTol);
}

TEST(MatMulGrad, F32MatchesF64) {
  EXPECT_LT(f32VersusF64("MatMul", {in({2, 3, 4}, 1), in({4, 5}, 2)}), 1e-5);
  EXPECT_LT(f32VersusF64("MatMul", {in({2, 1, 3, 4}, 1), in({3, 4, 5}, 2)}), 1e-5);
}

// --- Gemm ---

struct GemmCase {
  bool transA, transB;
  float alpha, beta;
  Shape c; // {-1}: no C
};

class GemmGrad : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmGrad, MatchesFiniteDifferences) {
  const GemmCase &gc = GetParam();
  const int64_t M = 3, K = 4, N = 5;
  Shape as = gc.transA ? Shape{K, M} : Shape{M, K}, bs = gc.transB ? Shape{N, K} : Shape{K, N};
  std::vector<GradCheckInput> ins{in(as, 1), in(bs, 2)};
  if (gc.c != Shape{-1}) ins.push_back(in(gc.c, 3));
  Attrs a = attrs({{"transA", I(gc.transA)}, {"transB", I(gc.transB)}, {"alpha", F(gc.alpha)}, {"beta", F(gc.beta)}});
  EXPECT_LT(gradCheck("Gemm", ins, a), kTol);
}

INSTANTIATE_TEST_SUITE_P(Attributes, GemmGrad,
                         ::testing::Values(GemmCase{false, false, 1, 1, {3, 5}}, GemmCase{true, false, 1, 1, {5}},
                                           GemmCase{false, true, 1, 1, {3, 1}}, GemmCase{true, true, 1, 1, {}},
                                           GemmCase{false, false, 0.5f, 2, {1, 5}},
                                           GemmCase{true, true, -1.5f, 0.25f, {3, 5}},
                                           GemmCase{true, false, 2, 1, {-1}}));

TEST(GemmGrad, F32MatchesF64) {
  EXPECT_LT(f32VersusF64("Gemm", {in({4, 3}, 1), in({5, 4}, 2), in({5}, 3)},
                         attrs({{"transA", I(1)}, {"transB", I(1)}, {"alpha", F(0.5f)}})),
            1e-5);
}

// --- Softmax / LogSoftmax ---

class SoftmaxGrad : public ::testing::TestWithParam<int64_t> {};

TEST_P(SoftmaxGrad, MatchesFiniteDifferences) {
  Attrs a = attrs({{"axis", I(GetParam())}});
  EXPECT_LT(gradCheck("Softmax", {in({2, 3, 4}, 1, -2, 2)}, a), kTol);
  EXPECT_LT(gradCheck("LogSoftmax", {in({2, 3, 4}, 2, -2, 2)}, a), kTol);
}

INSTANTIATE_TEST_SUITE_P(Axes, SoftmaxGrad, ::testing::Values(-1, 0, 1, -2));

TEST(SoftmaxGrad, DefaultAxisAndF32) {
  EXPECT_LT(gradCheck("Softmax", {in({3, 7}, 3)}), kTol);
  EXPECT_LT(gradCheck("LogSoftmax", {in({3, 7}, 4)}), kTol);
  EXPECT_LT(f32VersusF64("Softmax", {in({2, 3, 4}, 1)}, attrs({{"axis", I(1)}})), 1e-5);
  EXPECT_LT(f32VersusF64("LogSoftmax", {in({2, 3, 4}, 1)}, attrs({{"axis", I(0)}})), 1e-5);
}

// Hand-computed: softmax([0, log 3]) = [1/4, 3/4]; for dy = [1, 0],
// dx = y * (dy - <dy, y>) = [1/4 * 3/4, 3/4 * -1/4] = [3/16, -3/16].
TEST(SoftmaxGrad, HandComputedKernel) {
  using namespace ir;
  Graph g;
  Tensor x = Tensor::fromVector<double>(DType::F64, {2}, {0.0, std::log(3.0)});
  ValueId xv = g.addConst("x", x);
  autodiff::GradBuilder b(g);
  ValueId y = b.op("Softmax", {xv});
  ValueId dx = b.op("megac.SoftmaxGrad", {g.addConst("dy", Tensor::fromVector<double>(DType::F64, {2}, {1, 0})), y});
  ASSERT_FALSE(b.failed());
  g.outputs = {dx};
  auto out = runGraph(g, {});
  ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
  EXPECT_NEAR((*out)[0].getAsDouble(0), 3.0 / 16, 1e-12);
  EXPECT_NEAR((*out)[0].getAsDouble(1), -3.0 / 16, 1e-12);
}

// --- LayerNormalization / RMSNormalization ---

struct NormCase {
  Shape x, scale, bias; // bias {-1}: none
  int64_t axis;
  float epsilon;
};

class NormGrad : public ::testing::TestWithParam<NormCase> {};

TEST_P(NormGrad, LayerNormalization) {
  const NormCase &nc = GetParam();
  std::vector<GradCheckInput> ins{in(nc.x, 1, -2, 2), in(nc.scale, 2)};
  if (nc.bias != Shape{-1}) ins.push_back(in(nc.bias, 3));
  EXPECT_LT(gradCheck("LayerNormalization", ins, attrs({{"axis", I(nc.axis)}, {"epsilon", F(nc.epsilon)}})), kTol);
}

TEST_P(NormGrad, RMSNormalization) {
  const NormCase &nc = GetParam();
  EXPECT_LT(gradCheck("RMSNormalization", {in(nc.x, 1, -2, 2), in(nc.scale, 2)},
                      attrs({{"axis", I(nc.axis)}, {"epsilon", F(nc.epsilon)}})),
            kTol);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, NormGrad,
    ::testing::Values(NormCase{{2, 3, 6}, {6}, {6}, -1, 1e-5f},        // the transformer form
                      NormCase{{2, 3, 4}, {3, 4}, {-1}, 1, 0.1f},      // two normalized dims, no B
                      NormCase{{2, 3, 4}, {1, 4}, {4}, 1, 1e-5f},      // Scale broadcast inside the row
                      NormCase{{2, 3, 4}, {2, 1, 4}, {3, 1}, -1, 0.5f}, // Scale/B vary across rows
                      NormCase{{3, 5}, {1}, {1}, 1, 1e-5f},             // scalar-like params
                      NormCase{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}, 0, 1e-3f})); // all dims normalized

TEST(NormGrad, F32MatchesF64) {
  Attrs a = attrs({{"axis", I(-1)}});
  EXPECT_LT(f32VersusF64("LayerNormalization", {in({4, 3, 16}, 1), in({16}, 2), in({16}, 3)}, a), 1e-5);
  EXPECT_LT(f32VersusF64("RMSNormalization", {in({4, 3, 16}, 1), in({16}, 2)}, a), 1e-5);
}

// --- Attention (opset 23) ---

struct AttentionCase {
  const char *name;
  bool is3D;
  int64_t qHeads, kvHeads, qSeq, kvSeq, headSize, vHeadSize;
  Attrs attrs;
  // Mask kind: 0 none, 1 bool [qSeq, kvSeq], 2 float [B, 1, qSeq, kvSeq] with -inf,
  // 3 bool with a fully masked row, 4 float mask shorter than kvSeq (padded with -inf).
  int mask = 0;
};

constexpr int64_t kBatch = 2;

std::vector<GradCheckInput> attentionInputs(const AttentionCase &ac) {
  auto shape = [&](int64_t heads, int64_t seq, int64_t size) {
    return ac.is3D ? Shape{kBatch, seq, heads * size} : Shape{kBatch, heads, seq, size};
  };
  std::vector<GradCheckInput> ins{in(shape(ac.qHeads, ac.qSeq, ac.headSize), 11, -1.5, 1.5),
                                  in(shape(ac.kvHeads, ac.kvSeq, ac.headSize), 12, -1.5, 1.5),
                                  in(shape(ac.kvHeads, ac.kvSeq, ac.vHeadSize), 13)};
  std::mt19937 rng(7);
  if (ac.mask == 1 || ac.mask == 3) {
    Tensor m(DType::Bool, {ac.qSeq, ac.kvSeq});
    for (int64_t i = 0; i < m.numel(); ++i) m.setFromDouble(i, (rng() % 3) != 0 || i % ac.kvSeq == 0);
    if (ac.mask == 3)
      for (int64_t j = 0; j < ac.kvSeq; ++j) m.setFromDouble(1 * ac.kvSeq + j, 0);
    ins.push_back(constant(m));
  } else if (ac.mask == 2 || ac.mask == 4) {
    int64_t len = ac.mask == 4 ? ac.kvSeq - 2 : ac.kvSeq;
    Tensor m = randomTensor(DType::F64, {kBatch, 1, ac.qSeq, len}, 8, -2, 1);
    for (int64_t i = 0; i < m.numel(); i += 3)
      if (i % len) m.setFromDouble(i, -std::numeric_limits<double>::infinity());
    ins.push_back(constant(m));
  }
  return ins;
}

class AttentionGrad : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionGrad, MatchesFiniteDifferences) {
  const AttentionCase &ac = GetParam();
  EXPECT_LT(gradCheck("Attention", attentionInputs(ac), ac.attrs), kTol) << ac.name;
}

TEST_P(AttentionGrad, F32MatchesF64) {
  const AttentionCase &ac = GetParam();
  EXPECT_LT(f32VersusF64("Attention", attentionInputs(ac), ac.attrs), 1e-5) << ac.name;
}

INSTANTIATE_TEST_SUITE_P(
    Forms, AttentionGrad,
    ::testing::Values(AttentionCase{"plain", false, 2, 2, 3, 3, 4, 4, {}},
                      AttentionCase{"gqa", false, 4, 2, 3, 5, 4, 3, {}},
                      AttentionCase{"causal", false, 2, 2, 4, 4, 3, 3, attrs({{"is_causal", I(1)}})},
                      AttentionCase{"causal gqa scale", false, 4, 1, 4, 4, 4, 2,
                                    attrs({{"is_causal", I(1)}, {"scale", F(0.3f)}})},
                      AttentionCase{"bool mask", false, 2, 2, 3, 5, 4, 4, {}, 1},
                      AttentionCase{"float mask causal", false, 2, 1, 4, 4, 3, 3, attrs({{"is_causal", I(1)}}), 2},
                      AttentionCase{"fully masked row", false, 2, 2, 3, 4, 3, 3, {}, 3},
                      AttentionCase{"short float mask", false, 2, 2, 3, 5, 3, 3, {}, 4},
                      AttentionCase{"softcap", false, 2, 2, 3, 4, 3, 3, attrs({{"softcap", F(2.0f)}})},
                      AttentionCase{"3-D gqa causal", true, 4, 2, 3, 3, 2, 3,
                                    attrs({{"q_num_heads", I(4)}, {"kv_num_heads", I(2)}, {"is_causal", I(1)}})}),
    [](const ::testing::TestParamInfo<AttentionCase> &i) {
      std::string n = i.param.name;
      for (char &ch : n)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST(AttentionGradOnly, PresentKeyValueGradientsPassThrough) {
  // Only present_key (present_value) is seeded: its gradient is K's (V's) own.
  auto onlyInput = [](std::vector<GradCheckInput> ins, size_t keep) {
    for (size_t i = 0; i < ins.size(); ++i) ins[i].differentiate = i == keep;
    return ins;
  };
  AttentionCase ac{"present", false, 2, 2, 3, 3, 4, 4, {}};
  EXPECT_LT(gradCheck("Attention", onlyInput(attentionInputs(ac), 1), {}, 3, 1), kTol);
  AttentionCase ac3{"present3d", true, 2, 1, 3, 3, 2, 2, attrs({{"q_num_heads", I(2)}, {"kv_num_heads", I(1)}})};
  EXPECT_LT(gradCheck("Attention", onlyInput(attentionInputs(ac3), 2), ac3.attrs, 3, 2), kTol);
}

// --- RotaryEmbedding (opset 23) ---

struct RotaryCase {
  const char *name;
  Shape x, cache;
  Attrs attrs;
  bool positionIds = false;
};

class RotaryGrad : public ::testing::TestWithParam<RotaryCase> {};

std::vector<GradCheckInput> rotaryInputs(const RotaryCase &rc) {
  std::vector<GradCheckInput> ins{in(rc.x, 21)};
  Tensor theta = randomTensor(DType::F64, rc.cache, 22, -3, 3);
  Tensor cs(DType::F64, rc.cache), sn(DType::F64, rc.cache);
  for (int64_t i = 0; i < theta.numel(); ++i) {
    cs.setFromDouble(i, std::cos(theta.getAsDouble(i)));
    sn.setFromDouble(i, std::sin(theta.getAsDouble(i)));
  }
  ins.push_back(constant(cs));
  ins.push_back(constant(sn));
  if (rc.positionIds) ins.push_back(fixed(int64s({2, 3}, {0, 1, 2, 5, 3, 0})));
  return ins;
}

TEST_P(RotaryGrad, MatchesFiniteDifferences) {
  const RotaryCase &rc = GetParam();
  EXPECT_LT(gradCheck("RotaryEmbedding", rotaryInputs(rc), rc.attrs), kTol) << rc.name;
}

TEST_P(RotaryGrad, F32MatchesF64) {
  const RotaryCase &rc = GetParam();
  EXPECT_LT(f32VersusF64("RotaryEmbedding", rotaryInputs(rc), rc.attrs), 1e-5) << rc.name;
}

INSTANTIATE_TEST_SUITE_P(
    Forms, RotaryGrad,
    ::testing::Values(RotaryCase{"halves", {2, 2, 3, 8}, {2, 3, 4}, {}},
                      RotaryCase{"interleaved batch1 cache", {2, 2, 3, 8}, {1, 3, 4}, attrs({{"interleaved", I(1)}})},
                      RotaryCase{"partial", {2, 2, 3, 8}, {1, 3, 2}, attrs({{"rotary_embedding_dim", I(4)}})},
                      RotaryCase{"partial interleaved 3-D", {2, 3, 12}, {2, 3, 2},
                                 attrs({{"rotary_embedding_dim", I(4)}, {"interleaved", I(1)}, {"num_heads", I(2)}})},
                      RotaryCase{"position ids", {2, 2, 3, 6}, {8, 3}, {}, true}),
    [](const ::testing::TestParamInfo<RotaryCase> &i) {
      std::string n = i.param.name;
      for (char &ch : n)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

// --- megac.SoftmaxCrossEntropy ---

TEST(SoftmaxCrossEntropyGrad, MatchesFiniteDifferences) {
  Tensor targets = int64s({2, 3}, {4, 0, -100, 2, 2, 1});
  EXPECT_LT(gradCheck("megac.SoftmaxCrossEntropy", {in({2, 3, 5}, 31, -3, 3), fixed(targets)}), kTol);
  // A custom ignore_index: the positions whose target is 3 are skipped.
  Tensor t2 = int64s({4}, {1, 3, 0, 3});
  EXPECT_LT(gradCheck("megac.SoftmaxCrossEntropy", {in({4, 6}, 32), fixed(t2)}, attrs({{"ignore_index", I(3)}})),
            kTol);
  EXPECT_LT(f32VersusF64("megac.SoftmaxCrossEntropy", {in({2, 3, 5}, 31), fixed(targets)}), 1e-5);
}

} // namespace
