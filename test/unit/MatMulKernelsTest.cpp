// sgemm, MatMul and Gemm CPU kernels against hand-computed results and a
// naive double-precision triple loop.
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace megac;
using namespace megac::cpu;

namespace {

std::vector<float> randomFloats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v) x = d(rng);
  return v;
}

Tensor randomTensor(Shape s, unsigned seed) {
  Tensor t(DType::F32, std::move(s));
  std::vector<float> v = randomFloats(size_t(t.numel()), seed);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

Tensor run(const std::string &op, std::vector<const Tensor *> ins, DType outType, Shape outShape,
           const Attrs &attrs = {}) {
  Tensor out(outType, std::move(outShape));
  KernelContext ctx{attrs, std::move(ins), {&out}};
  llvm::Error e = runKernel(op, ctx);
  EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
  return out;
}

// C = alpha * op(A) op(B) + beta * C, in double.
void referenceGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const std::vector<float> &A,
                   int64_t lda, const std::vector<float> &B, int64_t ldb, float beta, std::vector<float> &C,
                   int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)]) *
             double(tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]);
      float &c = C[size_t(i * ldc + j)];
      c = float(alpha * s + (beta == 0.0f ? 0.0 : double(beta) * c));
    }
}

// Runs sgemm (or sgemmSerial) on random data with padded leading dimensions
// and compares every element, including the padding, with the reference.
void checkSgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, bool serial) {
  int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
  std::vector<float> A = randomFloats(size_t((ta ? K : M) * lda), 1);
  std::vector<float> B = randomFloats(size_t((tb ? N : K) * ldb), 2);
  std::vector<float> C = randomFloats(size_t(M * ldc), 3);
  if (beta == 0.0f)
    for (int64_t i = 0; i < M; ++i) C[size_t(i * ldc)] = NAN; // beta == 0 must not read C
  std::vector<float> expect = C;
  referenceGemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, expect, ldc);
  if (serial) sgemmSerial(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  else sgemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  double tol = 1e-5 * double(K) + 1e-5;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      size_t at = size_t(i * ldc + j);
      if (j >= N) ASSERT_EQ(C[at], expect[at]) << "wrote past column N";
      else
        ASSERT_NEAR(C[at], expect[at], tol) << "M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb
                                            << " at (" << i << "," << j << ")";
    }
}

void checkAllShapes(bool serial) {
  const int64_t sizes[][3] = {{1, 1, 1},  {2, 3, 4},    {7, 13, 5},   {12, 32, 16}, {13, 33, 17},
                              {6, 16, 300}, {50, 70, 90}, {1, 200, 64}, {200, 1, 64}, {97, 130, 257},
                              {3, 5, 0}};
  for (auto &s : sizes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        checkSgemm(ta, tb, s[0], s[1], s[2], 1.0f, 0.0f, serial);
        checkSgemm(ta, tb, s[0], s[1], s[2], 0.5f, 1.0f, serial);
        checkSgemm(ta, tb, s[0], s[1], s[2], -1.5f, 0.25f, serial);
      }
}

} // namespace

TEST(Sgemm, MatchesReferenceOnEveryKernel) {
  for (const char *family : {"generic", "avx2", "avx512"}) {
    if (!setSgemmKernel(family)) continue; // not on this CPU
    SCOPED_TRACE(sgemmKernelName());
    checkAllShapes(/*serial=*/true);
    checkAllShapes(/*serial=*/false);
  }
  // Back to the default choice (the fastest the CPU has).
  EXPECT_TRUE(setSgemmKernel("avx512") || setSgemmKernel("avx2") || setSgemmKernel("generic"));
}

TEST(Sgemm, LargeThreadedProduct) {
  checkSgemm(false, false, 300, 520, 400, 1.0f, 0.0f, false);
  checkSgemm(true, true, 260, 300, 280, 1.0f, 1.0f, false);
}

TEST(MatMulKernel, HandComputed) {
  Tensor a = Tensor::fromVector<float>(DType::F32, {2, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::fromVector<float>(DType::F32, {2, 2}, {5, 6, 7, 8});
  Tensor y = run("MatMul", {&a, &b}, DType::F32, {2, 2});
  EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + 4), (std::vector<float>{19, 22, 43, 50}));
  Tensor v = Tensor::fromVector<float>(DType::F32, {2}, {1, -1});
  EXPECT_EQ(run("MatMul", {&v, &b}, DType::F32, {2}).data<float>()[1], -2.0f); // [1,-1] @ b = [-2,-2]
  EXPECT_EQ(run("MatMul", {&a, &v}, DType::F32, {2}).data<float>()[1], -1.0f); // a @ [1,-1] = [-1,-1]
  EXPECT_EQ(run("MatMul", {&v, &v}, DType::F32, {}).data<float>()[0], 2.0f);
}

namespace {
// out[batch..., i, j] with numpy broadcasting of the batch dims, in double.
std::vector<double> referenceMatMul(const Tensor &a, const Tensor &b, const Shape &batch, int64_t M, int64_t N,
                                    int64_t K) {
  // Element offset of batch entry `bi`'s matrix in t (rank >= 2, batch dims right-aligned).
  auto offset = [&batch](const Tensor &t, int64_t bi, int64_t matrix) {
    Shape tb(t.shape().begin(), t.shape().end() - 2);
    int64_t off = 0, stride = matrix, rem = bi;
    for (size_t d = batch.size(); d-- > 0;) {
      int64_t i = rem % batch[d];
      rem /= batch[d];
      if (d + tb.size() < batch.size()) continue;
      int64_t extent = tb[d + tb.size() - batch.size()];
      if (extent != 1) off += i * stride;
      stride *= extent;
    }
    return off;
  };
  std::vector<double> out;
  for (int64_t bi = 0; bi < numElements(batch); ++bi) {
    const float *am = a.data<float>() + offset(a, bi, M * K);
    const float *bm = b.data<float>() + offset(b, bi, K * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += double(am[i * K + k]) * double(bm[k * N + j]);
        out.push_back(s);
      }
  }
  return out;
}
} // namespace

TEST(MatMulKernel, BatchBroadcasting) {
  struct Case {
    Shape a, b, batch;
  };
  std::vector<Case> cases = {
      {{2, 1, 3, 4}, {5, 4, 6}, {2, 5}},  {{3, 4}, {2, 4, 6}, {2}},        {{2, 3, 4}, {4, 6}, {2}},
      {{2, 3, 4}, {2, 4, 6}, {2}},        {{1, 3, 4}, {7, 4, 6}, {7}},     {{64, 8, 16}, {64, 16, 8}, {64}},
      {{4, 50, 64}, {64, 300}, {4}},      {{3, 1, 30, 20}, {1, 2, 20, 10}, {3, 2}}};
  for (const Case &c : cases) {
    Tensor a = randomTensor(c.a, 5), b = randomTensor(c.b, 6);
    int64_t M = c.a[c.a.size() - 2], K = c.a.back(), N = c.b.back();
    Shape outShape = c.batch;
    outShape.push_back(M);
    outShape.push_back(N);
    Tensor y = run("MatMul", {&a, &b}, DType::F32, outShape);
    std::vector<double> ref = referenceMatMul(a, b, c.batch, M, N, K);
    ASSERT_EQ(int64_t(ref.size()), y.numel());
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_NEAR(y.data<float>()[i], ref[i], 1e-4) << shapeToString(c.a) << " x " << shapeToString(c.b) << " @" << i;
  }
}

TEST(MatMulKernel, DoubleAndIntegerTypes) {
  Tensor a = Tensor::fromVector<int32_t>(DType::I32, {2, 3}, {1, 2, 3, -4, 5, 6});
  Tensor b = Tensor::fromVector<int32_t>(DType::I32, {3, 1}, {7, 8, 9});
  Tensor y = run("MatMul", {&a, &b}, DType::I32, {2, 1});
  EXPECT_EQ(y.data<int32_t>()[0], 50);
  EXPECT_EQ(y.data<int32_t>()[1], 66);
  Tensor big = Tensor::fromVector<int64_t>(DType::I64, {1, 1}, {int64_t(1) << 40});
  EXPECT_EQ(run("MatMul", {&big, &big}, DType::I64, {1, 1}).data<int64_t>()[0], int64_t(0)); // 2^80 wraps to 0
  Tensor three = Tensor::fromVector<int64_t>(DType::I64, {1, 1}, {3});
  EXPECT_EQ(run("MatMul", {&big, &three}, DType::I64, {1, 1}).data<int64_t>()[0], int64_t(3) << 40);
  Tensor da = Tensor::fromVector<double>(DType::F64, {1, 2}, {0.1, 0.2});
  Tensor db = Tensor::fromVector<double>(DType::F64, {2, 1}, {3.0, 4.0});
  EXPECT_DOUBLE_EQ(run("MatMul", {&da, &db}, DType::F64, {1, 1}).data<double>()[0], 0.1 * 3.0 + 0.2 * 4.0);
}

TEST(MatMulKernel, MismatchedInnerDimensionIsAnError) {
  Tensor a(DType::F32, {2, 3}), b(DType::F32, {4, 2});
  Tensor out(DType::F32, {2, 2});
  Attrs none;
  KernelContext ctx{none, {&a, &b}, {&out}};
  llvm::Error e = runKernel("MatMul", ctx);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("inner dimensions"), std::string::npos);
}

TEST(GemmKernel, AttributesAndBiasBroadcast) {
  const int64_t M = 5, N = 7, K = 3;
  Tensor aT = randomTensor({K, M}, 8), bT = randomTensor({N, K}, 9);
  std::vector<Shape> biasShapes = {{}, {1}, {N}, {1, N}, {M, 1}, {M, N}};
  for (const Shape &cs : biasShapes) {
    Tensor c = randomTensor(cs, 10);
    Attrs attrs;
    attrs.set("transA", Attr::ofInt(1));
    attrs.set("transB", Attr::ofInt(1));
    attrs.set("alpha", Attr::ofFloat(0.5f));
    attrs.set("beta", Attr::ofFloat(2.0f));
    Tensor y = run("Gemm", {&aT, &bT, &c}, DType::F32, {M, N}, attrs);
    int64_t cRows = cs.size() == 2 ? cs[0] : 1, cCols = cs.empty() ? 1 : cs.back();
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += double(aT.data<float>()[k * M + i]) * bT.data<float>()[j * K + k];
        double bias = c.data<float>()[(cRows == 1 ? 0 : i) * cCols + (cCols == 1 ? 0 : j)];
        ASSERT_NEAR(y.data<float>()[i * N + j], 0.5 * s + 2.0 * bias, 1e-5) << "C " << shapeToString(cs);
      }
  }
  Tensor a = Tensor::fromVector<float>(DType::F32, {1, 2}, {1, 2});
  Tensor b = Tensor::fromVector<float>(DType::F32, {2, 1}, {3, 4});
  EXPECT_EQ(run("Gemm", {&a, &b}, DType::F32, {1, 1}).data<float>()[0], 11.0f); // no C
  Tensor da = Tensor::fromVector<double>(DType::F64, {1, 2}, {1, 2});
  Tensor db = Tensor::fromVector<double>(DType::F64, {2, 1}, {3, 4});
  Tensor dc = Tensor::fromVector<double>(DType::F64, {1}, {0.5});
  EXPECT_EQ(run("Gemm", {&da, &db, &dc}, DType::F64, {1, 1}).data<double>()[0], 11.5);
}
