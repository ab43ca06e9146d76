// MatMul and Gemm on the GPU (cuBLASLt through ltMatmul) against the CPU
// kernels: 1-D operands, every batch broadcasting pattern the kernel plans
// differently (one strided batch, A folded into M, stride-0 operands, loops
// over outer groups, > 65535 products), odd sizes, every Gemm transpose and C
// form, and each compute mode with its tolerance.
#include "GpuOpCheck.h"
#include "runtime/cuda/LtMatmul.h"
#include "runtime/plan/StreamLayout.h"

#include <algorithm>
#include <cmath>

using namespace megac;
using namespace megac::gputest;
using cuda::ComputeMode;

namespace {


// Tolerance of |gpu - cpu| / (1 + |cpu|) for each arithmetic. A is uniform in
// [-1, 1] and B in [-1, 1] / sqrt(K) (see rhsRange), so results and their
// rounding errors do not grow with K: bf16 inputs (relative rounding 2^-9)
// then give errors near 1e-3 at most, tf32 (2^-11) a quarter of that.
double tolFor(ComputeMode m) {
  switch (m) {
  case ComputeMode::FP32: return 1e-5;
  case ComputeMode::TF32: return 5e-3;
  case ComputeMode::BF16: return 3e-2;
  }
  return 0;
}

const ComputeMode kModes[] = {ComputeMode::FP32, ComputeMode::TF32, ComputeMode::BF16};

// numpy matmul's result shape (the operands are assumed compatible).
Shape matMulResult(const Shape &a, const Shape &b) {
  Shape aB(a.begin(), a.end() - std::min<size_t>(a.size(), 2)), bB(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
  size_t r = std::max(aB.size(), bB.size());
  Shape out(r, 1);
  for (size_t k = 0; k < r; ++k) {
    int64_t da = k < aB.size() ? aB[aB.size() - 1 - k] : 1, db = k < bB.size() ? bB[bB.size() - 1 - k] : 1;
    out[r - 1 - k] = da == 1 ? db : da;
  }
  if (a.size() >= 2) out.push_back(a[a.size() - 2]);
  if (b.size() >= 2) out.push_back(b.back());
  return out;
}

double rhsRange(int64_t K) { return 1.0 / std::sqrt(double(std::max<int64_t>(K, 1))); }

OpCase matMulCase(const Shape &a, const Shape &b, ComputeMode mode, unsigned seed) {
  OpCase c;
  c.op = "MatMul";
  const double r = rhsRange(a.back());
  c.inputs = {randomTensor(a, seed), randomTensor(b, seed + 1, DType::F32, -r, r)};
  c.outputs = {{DType::F32, matMulResult(a, b)}};
  c.mode = mode;
  return c;
}

void expectMatMul(const Shape &a, const Shape &b, ComputeMode mode = ComputeMode::FP32, unsigned seed = 1) {
  SCOPED_TRACE(shapeToString(a) + " x " + shapeToString(b) + " " + cuda::computeModeName(mode));
  EXPECT_GPU_MATCHES_CPU(matMulCase(a, b, mode, seed), gpu(), tolFor(mode));
}

TEST(MatMulGpu, OneDimensionalOperands) {
  expectMatMul({13}, {13, 7});
  expectMatMul({7, 13}, {13});
  expectMatMul({33}, {33});        // a scalar
  expectMatMul({5}, {3, 5, 4});    // 1-D against a batch
  expectMatMul({3, 4, 5}, {5});    // a batch against 1-D
  expectMatMul({2, 3, 4, 5}, {5}); // folded into M
}

TEST(MatMulGpu, TwoDimensional) {
  expectMatMul({7, 13}, {13, 33});
  expectMatMul({1, 1}, {1, 1});
  expectMatMul({5, 1}, {1, 6}); // K = 1
  expectMatMul({64, 64}, {64, 64});
  expectMatMul({1, 1000}, {1000, 3});
}

TEST(MatMulGpu, BatchedAgainstMatrix) {
  expectMatMul({3, 7, 13}, {13, 9});    // B shared: one taller product
  expectMatMul({7, 13}, {3, 13, 9});    // A shared: stride-0 A
  expectMatMul({2, 3, 7, 13}, {13, 9}); // two batch dims folded
  expectMatMul({1, 1, 7, 13}, {13, 9}); // all-1 batch dims
}

TEST(MatMulGpu, SameBatch) {
  expectMatMul({4, 7, 13}, {4, 13, 9});
  expectMatMul({2, 3, 7, 13}, {2, 3, 13, 9});
  expectMatMul({2, 3, 16, 64}, {2, 3, 64, 16});
}

TEST(MatMulGpu, BroadcastBatch) {
  expectMatMul({2, 1, 3, 4}, {1, 5, 4, 6});    // loop over one run, stride-0 A inside
  expectMatMul({2, 4, 5, 8}, {2, 1, 8, 5});    // [B,H,S,D] x [B,1,D,S]: fold H into M, batch over B
  expectMatMul({2, 1, 5, 8}, {2, 4, 8, 5});    // A repeated over H
  expectMatMul({3, 1, 2, 5, 6}, {1, 4, 1, 6, 7}); // three runs: fold, batch, loop
  expectMatMul({4, 1, 3, 5}, {1, 3, 5, 2});
  expectMatMul({5, 3, 4}, {2, 1, 4, 6});       // different batch ranks
  expectMatMul({1, 3, 4}, {2, 5, 4, 6});
}

TEST(MatMulGpu, OddSizes) {
  expectMatMul({7, 13}, {13, 33});
  expectMatMul({33, 7}, {7, 13});
  expectMatMul({3, 13, 33}, {3, 33, 7});
  expectMatMul({129, 257}, {257, 65});
}

TEST(MatMulGpu, EmptyAndZeroInner) {
  expectMatMul({3, 0}, {0, 4}); // K = 0: zeros
  expectMatMul({0, 5}, {5, 3}); // an empty result
  expectMatMul({2, 0, 5}, {5, 3});
}

TEST(MatMulGpu, ManyProducts) {
  // More products than one cuBLASLt call takes.
  expectMatMul({70000, 1, 2}, {70000, 2, 3});
}

TEST(MatMulGpu, EachComputeMode) {
  for (ComputeMode m : kModes) {
    expectMatMul({7, 13}, {13, 33}, m);
    expectMatMul({2, 1, 3, 40}, {1, 5, 40, 6}, m);
    expectMatMul({4, 33, 64}, {64, 17}, m);
  }
}

// In BF16 mode every product's operands are packed to bf16, however small
// (so bf16 plans round alike at every size): against CPU kernels rounding
// their operands the same way, only the summation order differs. With fp32
// operands the gap would be about 1e-3.
TEST(MatMulGpu, Bf16RoundsEveryProductsOperands) {
  ScopedCpuBf16Operands emulate;
  const std::pair<Shape, Shape> cases[] = {
      {{7, 13}, {13, 33}},                  // 6006 flops
      {{2, 16, 64}, {64, 176}},             // a fixture's MLP projection
      {{2, 4, 16, 16}, {2, 4, 16, 16}},     // a fixture's attention scores
      {{3, 40}, {40}},                      // a vector
      {{512, 1024}, {1024, 768}}};
  unsigned seed = 21;
  for (const auto &[a, b] : cases) {
    SCOPED_TRACE(shapeToString(a) + " x " + shapeToString(b));
    EXPECT_GPU_MATCHES_CPU(matMulCase(a, b, ComputeMode::BF16, seed++), gpu(), 2e-5);
  }
}

// Larger products: in BF16 mode ltMatmul packs both operands to bf16 in the
// kernel's scratch (strided batches, broadcast B), as it does small ones.
TEST(MatMulGpu, Large) {
  for (ComputeMode m : kModes) expectMatMul({512, 1024}, {1024, 768}, m, 7);
  expectMatMul({8, 128, 256}, {8, 256, 128}, ComputeMode::BF16, 9);
  expectMatMul({3, 200, 384}, {384, 300}, ComputeMode::BF16, 11);
  expectMatMul({2, 3, 130, 256}, {1, 3, 256, 258}, ComputeMode::BF16, 13);
}

TEST(MatMulGpu, UnsupportedTypeIsAnError) {
  OpCase c;
  c.op = "MatMul";
  c.inputs = {randomTensor({3, 4}, 1, DType::I64, -5, 5), randomTensor({4, 2}, 2, DType::I64, -5, 5)};
  c.outputs = {{DType::I64, {3, 2}}};
  OpResult r = runOnBoth(c, gpu());
  EXPECT_NE(r.error.find("GPU: MatMul:"), std::string::npos) << r.error;
}

// --- Gemm ---

struct GemmSpec {
  int64_t M = 7, N = 33, K = 13;
  bool transA = false, transB = false;
  float alpha = 1.0f, beta = 1.0f;
  bool setAlphaBeta = false;
  bool hasC = false;
  Shape c;
  ComputeMode mode = ComputeMode::FP32;
};

OpCase gemmCase(const GemmSpec &s, unsigned seed) {
  OpCase c;
  c.op = "Gemm";
  const double r = rhsRange(s.K);
  c.inputs = {randomTensor(s.transA ? Shape{s.K, s.M} : Shape{s.M, s.K}, seed),
              randomTensor(s.transB ? Shape{s.N, s.K} : Shape{s.K, s.N}, seed + 1, DType::F32, -r, r)};
  if (s.hasC) c.inputs.push_back(randomTensor(s.c, seed + 2));
  if (s.transA) c.attrs.set("transA", Attr::ofInt(1));
  if (s.transB) c.attrs.set("transB", Attr::ofInt(1));
  if (s.setAlphaBeta) {
    c.attrs.set("alpha", Attr::ofFloat(s.alpha));
    c.attrs.set("beta", Attr::ofFloat(s.beta));
  }
  c.outputs = {{DType::F32, {s.M, s.N}}};
  c.mode = s.mode;
  return c;
}

void expectGemm(const GemmSpec &s, unsigned seed = 3) {
  SCOPED_TRACE("Gemm M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) +
               " transA=" + std::to_string(s.transA) + " transB=" + std::to_string(s.transB) +
               " alpha=" + std::to_string(s.alpha) + " beta=" + std::to_string(s.beta) +
               (s.hasC ? " C=" + shapeToString(s.c) : " no C") + " " + cuda::computeModeName(s.mode));
  EXPECT_GPU_MATCHES_CPU(gemmCase(s, seed), gpu(), tolFor(s.mode));
}

TEST(GemmGpu, Transposes) {
  for (bool tA : {false, true})
    for (bool tB : {false, true}) {
      GemmSpec s;
      s.transA = tA, s.transB = tB;
      expectGemm(s); // no C
      s.hasC = true, s.c = {s.N};
      expectGemm(s); // a bias row (epilogue)
      s.c = {s.M, s.N}, s.setAlphaBeta = true, s.alpha = 0.5f, s.beta = 2.0f;
      expectGemm(s);
    }
}

TEST(GemmGpu, LargeBf16Transposes) {
  for (bool tA : {false, true})
    for (bool tB : {false, true}) {
      GemmSpec s;
      s.M = 256, s.N = 384, s.K = 520, s.mode = ComputeMode::BF16;
      s.transA = tA, s.transB = tB;
      expectGemm(s, 5);
      s.hasC = true, s.c = {s.N};
      expectGemm(s, 6);
    }
}

TEST(GemmGpu, CForms) {
  const Shape forms[] = {{}, {1}, {33}, {1, 33}, {7, 1}, {7, 33}, {1, 1}};
  for (const Shape &cs : forms)
    for (float beta : {1.0f, 0.7f}) {
      GemmSpec s;
      s.hasC = true, s.c = cs, s.setAlphaBeta = true, s.alpha = -1.5f, s.beta = beta;
      expectGemm(s);
    }
}

TEST(GemmGpu, BetaZeroIgnoresC) {
  GemmSpec s;
  s.setAlphaBeta = true, s.alpha = 2.0f, s.beta = 0.0f;
  OpCase c = gemmCase(s, 5);
  Tensor nanC(DType::F32, {s.M, s.N});
  for (int64_t i = 0; i < nanC.numel(); ++i) nanC.data<float>()[i] = NAN;
  c.inputs.push_back(nanC);
  EXPECT_GPU_MATCHES_CPU(c, gpu(), 1e-5);
}

TEST(GemmGpu, OddAndDegenerateSizes) {
  struct Dims {
    int64_t M, N, K;
  };
  const Dims sizes[] = {{1, 1, 1}, {3, 5, 1}, {13, 7, 33}, {1, 100, 17}, {100, 1, 17}};
  for (const Dims &d : sizes) {
    GemmSpec s;
    s.M = d.M, s.N = d.N, s.K = d.K, s.transB = true, s.hasC = true, s.c = {d.N};
    expectGemm(s);
  }
  GemmSpec zeroK; // K = 0: Y = beta * C
  zeroK.M = 3, zeroK.N = 4, zeroK.K = 0, zeroK.hasC = true, zeroK.c = {3, 4}, zeroK.setAlphaBeta = true;
  zeroK.beta = 0.5f;
  expectGemm(zeroK);
  zeroK.c = {4}, zeroK.beta = 1.0f;
  expectGemm(zeroK);
}

TEST(GemmGpu, EachComputeMode) {
  for (ComputeMode m : kModes) {
    GemmSpec s;
    s.M = 256, s.N = 384, s.K = 512, s.transB = true, s.hasC = true, s.c = {384}, s.mode = m;
    expectGemm(s, 11);
    s.transA = true, s.transB = false, s.c = {256, 1}, s.setAlphaBeta = true, s.alpha = 0.25f, s.beta = 3.0f;
    expectGemm(s, 12);
  }
}

TEST(GemmGpu, UnsupportedTypeIsAnError) {
  OpCase c;
  c.op = "Gemm";
  c.inputs = {randomTensor({3, 4}, 1, DType::F64), randomTensor({4, 2}, 2, DType::F64)};
  c.outputs = {{DType::F64, {3, 2}}};
  OpResult r = runOnBoth(c, gpu());
  EXPECT_NE(r.error.find("GPU: Gemm:"), std::string::npos) << r.error;
}

} // namespace

namespace {

// Device copies of host float arrays, freed at the end of the scope.
struct DeviceFloats {
  float *p = nullptr;
  explicit DeviceFloats(const std::vector<float> &h) {
    cudaMalloc(&p, h.size() * 4);
    cudaMemcpy(p, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
  }
  ~DeviceFloats() { cudaFree(p); }
};

std::vector<float> randomFloats(size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(std::sin(double(i) * 0.37 + seed) * 0.9);
  return v;
}

std::vector<float> download(const float *d, size_t n) {
  std::vector<float> h(n);
  cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost);
  return h;
}

} // namespace

// Products that read the same A one after another (a layer's q, k and v)
// share its bf16 copy, bit for bit; after a product that writes over A's
// bytes without packing (no scratch), or an epoch change (GpuProgram: any op
// but a product or a view), the next one packs A again.
TEST(MatMulGpu, ConsecutiveProductsShareThePackedA) {
  cuda::GpuContext &ctx = gpu().get();
  const int64_t M = 64, K = 96, N = 80, S = std::max({M * K, K * N, M * N});
  const std::vector<float> zeros(static_cast<size_t>(S), 0.0f);
  DeviceFloats a(randomFloats(size_t(S), 1)), b1(randomFloats(size_t(S), 2)), b2(randomFloats(size_t(S), 3)), c(zeros),
      ref(zeros);
  void *scratch = nullptr;
  const size_t scratchBytes = size_t(plan::bf16PackBytes(M * K, K * N));
  ASSERT_EQ(cudaMalloc(&scratch, scratchBytes), cudaSuccess);
  const ComputeMode saved = ctx.mode;
  ctx.mode = ComputeMode::BF16;
  auto product = [&](const float *A, const float *B, float *C, bool packs = true) {
    cuda::LtGemm g;
    g.m = M, g.n = N, g.k = K;
    g.a = A, g.b = B, g.c = C;
    if (packs) g.scratch = scratch, g.scratchBytes = scratchBytes;
    llvm::Error e = cuda::ltMatmul(ctx, g);
    EXPECT_FALSE(bool(e)) << llvm::toString(std::move(e));
    cudaStreamSynchronize(ctx.stream);
  };
  auto result = [&](const float *A, const float *B) { // without reuse
    const bool was = ctx.packReuse;
    ctx.packReuse = false;
    product(A, B, ref.p);
    ctx.packReuse = was;
    ++ctx.packEpoch;
    return download(ref.p, size_t(M * N));
  };
  const std::vector<float> want = result(a.p, b2.p);
  ctx.packReuse = true;
  const uint64_t reused = ctx.packsReused;
  product(a.p, b1.p, c.p);
  product(a.p, b2.p, c.p);
  EXPECT_EQ(ctx.packsReused, reused + 1);
  EXPECT_TRUE(download(c.p, size_t(M * N)) == want);

  product(a.p, b1.p, c.p); // A is still the packed copy: reused
  EXPECT_EQ(ctx.packsReused, reused + 2);
  product(b1.p, b2.p, a.p, /*packs=*/false); // new values in A's bytes, on fp32 operands
  product(a.p, b2.p, c.p);                   // must pack the new A
  EXPECT_EQ(ctx.packsReused, reused + 2);
  const std::vector<float> got = download(c.p, size_t(M * N));
  EXPECT_TRUE(got == result(a.p, b2.p));
  EXPECT_FALSE(got == want);

  product(a.p, b2.p, c.p); // packs (result() moved the epoch)
  product(a.p, b2.p, c.p); // reused
  EXPECT_EQ(ctx.packsReused, reused + 3);
  ++ctx.packEpoch;
  product(a.p, b2.p, c.p); // another epoch: packs again
  EXPECT_EQ(ctx.packsReused, reused + 3);
  ctx.packReuse = false;
  ctx.mode = saved;
  cudaFree(scratch);
}
