#include "runtime/core/Tensor.h"

#include <gtest/gtest.h>

using namespace megac;

TEST(Tensor, ShapeAndStrides) {
  Tensor t(DType::F32, {2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(rowMajorStrides(t.shape()), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(shapeToString(t.shape()), "[2,3,4]");
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
}

TEST(Tensor, CloneIsDeep) {
  Tensor a = Tensor::fromVector<int64_t>(DType::I64, {3}, {1, 2, 3});
  Tensor b = a.clone();
  Tensor c = a;
  b.data<int64_t>()[0] = 7;
  c.data<int64_t>()[1] = 9;
  EXPECT_EQ(a.data<int64_t>()[0], 1);
  EXPECT_EQ(a.data<int64_t>()[1], 9);
  EXPECT_FALSE(a.identical(b));
  EXPECT_TRUE(a.identical(c));
}

TEST(DType, HalfAndBf16RoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 1e-3f}) {
    EXPECT_NEAR(halfToFloat(floatToHalf(f)), f, std::abs(f) * 1e-3f);
    EXPECT_NEAR(bf16ToFloat(floatToBf16(f)), f, std::abs(f) * 1e-2f);
  }
  EXPECT_EQ(parseDType("bf16"), DType::BF16);
  EXPECT_FALSE(parseDType("f8").has_value());
}
