// The vectorized exp and row max used by Softmax, against libm in double.
#include "runtime/cpu/VecMath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace megac::cpu;

TEST(VecMath, ExpIsAccurateOverTheFloatRange) {
  std::vector<float> x;
  for (float v = -87.0f; v < 88.5f; v += 0.0137f) x.push_back(v);
  std::vector<float> y(x.size());
  double sum = expShiftedSum(x.data(), 0.0f, y.data(), int64_t(x.size()));
  double expectSum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double want = std::exp(double(x[i]));
    expectSum += double(y[i]);
    ASSERT_NEAR(y[i], want, want * 3e-7) << "exp(" << x[i] << ")";
  }
  EXPECT_NEAR(sum, expectSum, expectSum * 1e-6);
}

TEST(VecMath, ExpShiftAndSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n = 0; n < 40; ++n) { // every tail length
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n), -1.0f);
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(i % 7) - 3.0f;
    double sum = expShiftedSum(x.data(), 2.0f, y.data(), n);
    double want = 0;
    for (int64_t i = 0; i < n; ++i) {
      double e = std::exp(double(x[size_t(i)]) - 2.0);
      want += e;
      ASSERT_NEAR(y[size_t(i)], e, e * 3e-7) << "n=" << n << " i=" << i;
    }
    EXPECT_NEAR(sum, want, 1e-5 * (1 + want)) << n;
  }
  std::vector<float> special = {-inf, 0.0f, NAN, inf, -100.0f, 100.0f, 1.0f, -1.0f,
                                -inf, -inf, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -inf, NAN};
  std::vector<float> y(special.size());
  expShiftedSum(special.data(), 0.0f, y.data(), int64_t(special.size()));
  for (size_t i = 0; i < special.size(); ++i) {
    float v = special[i], got = y[i];
    if (std::isnan(v)) EXPECT_TRUE(std::isnan(got)) << i;
    else if (v == -inf) EXPECT_EQ(got, 0.0f) << i;
    else if (v == -100.0f) EXPECT_NEAR(got, 0.0f, 1e-37f) << i; // may flush the denormal to 0
    else if (v == inf || v == 100.0f) EXPECT_EQ(got, inf) << i;
    else EXPECT_NEAR(got, std::exp(v), std::exp(v) * 3e-7) << i;
  }
  EXPECT_TRUE(std::isnan(expShiftedSum(special.data(), 0.0f, nullptr, int64_t(special.size()))));
}

TEST(VecMath, RowMaxIgnoresNaN) {
  std::vector<float> x(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 17) % 37) - 20.0f;
  EXPECT_EQ(rowMax(x.data(), 37), 16.0f);
  x[3] = NAN;
  x[30] = NAN;
  EXPECT_EQ(rowMax(x.data(), 37), 16.0f);
  EXPECT_EQ(rowMax(x.data(), 0), -std::numeric_limits<float>::infinity());
  std::vector<float> tail = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 99};
  EXPECT_EQ(rowMax(tail.data(), 18), 99.0f);
}
