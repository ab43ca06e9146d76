// Finite-difference checks (float64) of the shape-op gradient rules
// (passes/autodiff/ShapeGrads.cpp), megac.SliceGrad and megac.GatherGrad,
// plus hand-computed scatters.
#include "GradTestUtil.h"

using namespace megac;
using namespace megac::testing;
using namespace megac::testing::grad;

namespace {

TEST(ReshapeLikeGrad, Reshape) {
  EXPECT_LT(gradCheck("Reshape", {in({2, 3, 4}, 1), constant(i64s({4, -1}))}), kTol);
  EXPECT_LT(gradCheck("Reshape", {in({6}, 2), constant(i64s({0 + 3, 2, 1}))}), kTol);
  EXPECT_LT(gradCheck("Reshape", {in({2, 3}, 3), constant(i64s({0, 3}))}), kTol); // 0 copies a dim
  EXPECT_LT(gradCheck("Reshape", {in({1}, 4), constant(i64s({}))}), kTol);
}

TEST(ReshapeLikeGrad, SqueezeUnsqueezeFlatten) {
  EXPECT_LT(gradCheck("Squeeze", {in({2, 1, 3, 1}, 5), constant(i64s({1, -1}))}), kTol);
  EXPECT_LT(gradCheck("Squeeze", {in({1, 3, 1}, 6)}), kTol);
  EXPECT_LT(gradCheck("Unsqueeze", {in({2, 3}, 7), constant(i64s({0, -1}))}), kTol);
  EXPECT_LT(gradCheck("Flatten", {in({2, 3, 4}, 8)}, attrs({{"axis", I(2)}})), kTol);
  EXPECT_LT(gradCheck("Flatten", {in({2, 3, 4}, 9)}, attrs({{"axis", I(0)}})), kTol);
  EXPECT_LT(gradCheck("Flatten", {in({2, 3, 4}, 10)}, attrs({{"axis", I(-1)}})), kTol);
}

TEST(TransposeGrad, PermutationsAndDefault) {
  EXPECT_LT(gradCheck("Transpose", {in({2, 3, 4}, 11)}, attrs({{"perm", Is({1, 2, 0})}})), kTol);
  EXPECT_LT(gradCheck("Transpose", {in({2, 3, 4, 5}, 12)}, attrs({{"perm", Is({0, 2, 3, 1})}})), kTol);
  EXPECT_LT(gradCheck("Transpose", {in({2, 3, 4}, 13)}), kTol); // reversed
  EXPECT_LT(f32VersusF64("Transpose", {in({2, 3, 4}, 14)}, attrs({{"perm", Is({2, 0, 1})}})), 1e-6);
}

TEST(ExpandGrad, SumsOverBroadcastDims) {
  EXPECT_LT(gradCheck("Expand", {in({3, 1}, 21), constant(i64s({2, 3, 4}))}), kTol);
  EXPECT_LT(gradCheck("Expand", {in({}, 22), constant(i64s({2, 2}))}), kTol);
  EXPECT_LT(gradCheck("Expand", {in({2, 3}, 23), constant(i64s({1, 3}))}), kTol); // identity shape
  EXPECT_LT(gradCheck("Expand", {in({4, 1, 3}, 24), constant(i64s({5, 1}))}), kTol);
}

TEST(ConcatGrad, SlicesTheGradient) {
  EXPECT_LT(gradCheck("Concat", {in({2, 3}, 31), in({2, 1}, 32), in({2, 4}, 33)}, attrs({{"axis", I(1)}})), kTol);
  EXPECT_LT(gradCheck("Concat", {in({1, 3}, 34), in({2, 3}, 35)}, attrs({{"axis", I(-2)}})), kTol);
  EXPECT_LT(gradCheck("Concat", {in({2, 3}, 36)}, attrs({{"axis", I(0)}})), kTol);
  // An empty operand, and one that is not differentiated.
  EXPECT_LT(gradCheck("Concat", {in({2, 0}, 37), in({2, 2}, 38)}, attrs({{"axis", I(1)}})), kTol);
  EXPECT_LT(gradCheck("Concat", {fixed(randomTensor(DType::F64, {2, 2}, 39)), in({2, 2}, 40)},
                      attrs({{"axis", I(0)}})),
            kTol);
}

TEST(SplitGrad, ConcatsGradientsWithZerosForMissingOnes) {
  // gradCheck seeds one output: the others contribute zeros.
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_LT(gradCheck("Split", {in({2, 6}, 41), constant(i64s({1, 2, 3}))}, attrs({{"axis", I(1)}}), 3, k), kTol);
    EXPECT_LT(gradCheck("Split", {in({6, 2}, 42)}, attrs({{"num_outputs", I(3)}}), 3, k), kTol);
  }
  EXPECT_LT(gradCheck("Split", {in({3, 5}, 43)}, attrs({{"axis", I(-1)}, {"num_outputs", I(2)}}), 2, 1), kTol);
}

TEST(SplitGrad, AllOutputsSeeded) {
  Tensor x = randomTensor(DType::F64, {4}, 44);
  auto g = analyticGrads("Split", {of(x), constant(i64s({1, 3}))}, {f64s({1}, {5}), f64s({3}, {6, 7, 8})});
  ASSERT_EQ(g.size(), 1u);
  expectTensorNear(g[0], {5, 6, 7, 8});
  auto h = analyticGrads("Split", {of(x), constant(i64s({1, 3}))}, {Tensor(), f64s({3}, {6, 7, 8})});
  ASSERT_EQ(h.size(), 1u);
  expectTensorNear(h[0], {0, 6, 7, 8});
}

TEST(SliceGrad, StartsEndsAxesSteps) {
  auto slice = [](Shape shape, std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> axes,
                  std::vector<int64_t> steps, uint32_t seed) {
    std::vector<GradCheckInput> ins{in(shape, seed), constant(i64s(starts)), constant(i64s(ends))};
    if (!axes.empty() || !steps.empty()) ins.push_back(axes.empty() ? none() : constant(i64s(axes)));
    if (!steps.empty()) ins.push_back(constant(i64s(steps)));
    return gradCheck("Slice", ins);
  };
  EXPECT_LT(slice({4, 5}, {1, 0}, {3, 5}, {}, {}, 51), kTol);
  EXPECT_LT(slice({4, 5}, {1}, {-1}, {1}, {}, 52), kTol);
  EXPECT_LT(slice({6, 5}, {0, 4}, {6, 0}, {0, 1}, {2, -1}, 53), kTol);       // step 2 and reversed
  EXPECT_LT(slice({6, 5}, {-1, 0}, {-100, 100}, {0, -1}, {-2, 3}, 54), kTol); // clamped, negative step
  EXPECT_LT(slice({3, 4, 5}, {1, 1}, {2, 4}, {2, 0}, {1, 1}, 55), kTol);
  EXPECT_LT(slice({4}, {2}, {2}, {0}, {}, 56), kTol); // empty slice: zero gradient
  EXPECT_LT(slice({4, 5}, {1}, {4}, {}, {2}, 57), kTol); // steps without axes
}

TEST(SliceGrad, HandComputedScatter) {
  // x[4], Slice(start 3, end 0, step -2) reads x[3], x[1].
  auto g = analyticGrads(
      "Slice",
      {of(f64s({4}, {0, 0, 0, 0})), constant(i64s({3})), constant(i64s({0})), constant(i64s({0})),
       constant(i64s({-2}))},
      {f64s({2}, {7, 9})});
  ASSERT_EQ(g.size(), 1u);
  expectTensorNear(g[0], {0, 9, 0, 7});
}

TEST(GatherGrad, ScatterAddsRepeatedIndices) {
  // An embedding lookup with repeated and negative ids.
  Tensor ids = Tensor::fromVector<int64_t>(DType::I64, {2, 3}, {1, 4, 1, -1, 0, 2});
  EXPECT_LT(gradCheck("Gather", {in({5, 3}, 61), fixed(ids)}), kTol);
  EXPECT_LT(gradCheck("Gather", {in({5, 3}, 62), constant(ids)}), kTol);
  EXPECT_LT(gradCheck("Gather", {in({2, 5, 3}, 63), fixed(ids)}, attrs({{"axis", I(1)}})), kTol);
  EXPECT_LT(gradCheck("Gather", {in({2, 3, 5}, 64), fixed(ids)}, attrs({{"axis", I(-1)}})), kTol);
  EXPECT_LT(gradCheck("Gather", {in({3, 4}, 65), fixed(i64scalar(2))}, attrs({{"axis", I(1)}})), kTol);
  auto g = analyticGrads("Gather", {of(f64s({3, 1}, {0, 0, 0})), fixed(i64s({2, 0, 2}))}, {f64s({3, 1}, {1, 2, 4})});
  ASSERT_EQ(g.size(), 1u);
  expectTensorNear(g[0], {2, 0, 5});
}

TEST(TileGrad, SumsTheRepeats) {
  EXPECT_LT(gradCheck("Tile", {in({2, 3}, 71), constant(i64s({2, 3}))}), kTol);
  EXPECT_LT(gradCheck("Tile", {in({2, 3, 2}, 72), constant(i64s({1, 2, 1}))}), kTol);
  EXPECT_LT(gradCheck("Tile", {in({3}, 73), constant(i64s({1}))}), kTol);
  auto g = analyticGrads("Tile", {of(f64s({2}, {0, 0})), constant(i64s({3}))}, {f64s({6}, {1, 2, 3, 4, 5, 6})});
  ASSERT_EQ(g.size(), 1u);
  expectTensorNear(g[0], {1 + 3 + 5, 2 + 4 + 6});
}

TEST(ShapeGradF32, SameAsF64) {
  Tensor ids = Tensor::fromVector<int64_t>(DType::I64, {2, 3}, {1, 4, 1, -1, 0, 2});
  EXPECT_LT(f32VersusF64("Gather", {in({5, 3}, 81), fixed(ids)}), 1e-6);
  EXPECT_LT(f32VersusF64("Slice", {in({6, 5}, 82), constant(i64s({0, 4})), constant(i64s({6, 0})),
                                   constant(i64s({0, 1})), constant(i64s({2, -1}))}),
            1e-6);
  EXPECT_LT(f32VersusF64("Tile", {in({2, 3}, 83), constant(i64s({2, 3}))}), 1e-6);
  EXPECT_LT(f32VersusF64("Concat", {in({2, 3}, 84), in({2, 1}, 85)}, attrs({{"axis", I(1)}})), 1e-6);
  EXPECT_LT(f32VersusF64("Expand", {in({3, 1}, 86), constant(i64s({2, 3, 4}))}), 1e-6);
}

} // namespace
