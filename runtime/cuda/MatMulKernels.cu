// MatMul (numpy matmul: 1-D operands, broadcast batch dims) and Gemm on f32,
// through ltMatmul (cuBLASLt; ctx.gpu.mode picks bf16 / tf32 / fp32 products).
// Semantics follow runtime/cpu/MatMulKernels.cpp.
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuKernel.h"
#include "runtime/cuda/LtMatmul.h"
#include "runtime/plan/StreamLayout.h"

#include <algorithm>

namespace megac::cuda {

namespace {

llvm::Error requireF32(llvm::StringRef op, const char *what, const DeviceTensor *t) {
  if (t->dtype != DType::F32)
    return gpuKernelError(op, llvm::Twine(what) + " has element type " + dtypeName(t->dtype) +
                                  "; the CUDA kernel takes f32");
  return llvm::Error::success();
}

// --- MatMul ---

// Consecutive output batch dims (size > 1) over which each operand either
// follows the output ("full": its matrices are consecutive) or repeats one
// matrix (broadcast). Such a run is one strided batch; strides in elements.
struct BatchRun {
  int64_t count = 1;
  bool aFull = false, bFull = false;
  int64_t strideA = 0, strideB = 0, strideC = 0;
};

struct MatMulShape {
  int64_t M = 0, N = 0, K = 0;
  std::vector<BatchRun> runs; // outermost first
};

llvm::Expected<MatMulShape> matMulShape(const Shape &a, const Shape &b, const Shape &y) {
  if (a.empty() || b.empty()) return gpuKernelError("MatMul", "inputs must have rank >= 1");
  MatMulShape s;
  s.M = a.size() == 1 ? 1 : a[a.size() - 2];
  s.K = a.back();
  const int64_t kb = b.size() == 1 ? b[0] : b[b.size() - 2];
  s.N = b.size() == 1 ? 1 : b.back();
  if (kb != s.K)
    return gpuKernelError("MatMul", "inner dimensions differ: " + shapeToString(a) + " x " + shapeToString(b));
  const size_t aRank = a.size() >= 2 ? a.size() - 2 : 0, bRank = b.size() >= 2 ? b.size() - 2 : 0;
  const size_t r = std::max(aRank, bRank);
  // Batch dims right-aligned, padded with 1.
  Shape aB(r, 1), bB(r, 1), out(r, 1);
  std::copy(a.begin(), a.begin() + aRank, aB.begin() + (r - aRank));
  std::copy(b.begin(), b.begin() + bRank, bB.begin() + (r - bRank));
  for (size_t d = 0; d < r; ++d) {
    if (aB[d] != bB[d] && aB[d] != 1 && bB[d] != 1)
      return gpuKernelError("MatMul", "batch dimensions do not broadcast: " + shapeToString(a) + " x " +
                                          shapeToString(b));
    out[d] = aB[d] == 1 ? bB[d] : aB[d];
  }
  if (numElements(out) * s.M * s.N != numElements(y))
    return gpuKernelError("MatMul", "output " + shapeToString(y) + " does not match the inputs");
  for (size_t d = 0; d < r; ++d) {
    if (out[d] == 1) continue;
    const bool aFull = aB[d] != 1, bFull = bB[d] != 1;
    if (!s.runs.empty() && s.runs.back().aFull == aFull && s.runs.back().bFull == bFull)
      s.runs.back().count *= out[d];
    else
      s.runs.push_back({out[d], aFull, bFull});
  }
  int64_t accA = s.M * s.K, accB = s.K * s.N, accC = s.M * s.N;
  for (size_t i = s.runs.size(); i-- > 0;) {
    BatchRun &run = s.runs[i];
    run.strideA = run.aFull ? accA : 0;
    run.strideB = run.bFull ? accB : 0;
    run.strideC = accC;
    if (run.aFull) accA *= run.count;
    if (run.bFull) accB *= run.count;
    accC *= run.count;
  }
  return s;
}

// As few cuBLASLt calls as the broadcast pattern allows: the innermost run is
// one strided batch, or, where B repeats over it and A's matrices are
// consecutive, folded into M (one taller product) with the next run as the
// strided batch. Any runs left are looped over.
llvm::Error runMatMul(GpuContext &gpu, const MatMulShape &s, const float *a, const float *b, float *y, void *scratch,
                      size_t scratchBytes, std::array<uint8_t, 2> packCache) {
  LtGemm g;
  g.scratch = scratch, g.scratchBytes = scratchBytes;
  g.cacheA = packCache[0], g.cacheB = packCache[1];
  g.m = s.M, g.n = s.N, g.k = s.K;
  g.lda = s.K, g.ldb = s.N, g.ldc = s.N;
  size_t loopRuns = s.runs.size();
  auto batchOver = [&](const BatchRun &run) {
    g.batch = run.count;
    g.strideA = run.strideA, g.strideB = run.strideB, g.strideC = run.strideC;
    --loopRuns;
  };
  if (loopRuns > 0) {
    const BatchRun &inner = s.runs[loopRuns - 1];
    if (inner.aFull && !inner.bFull) {
      g.m = s.M * inner.count;
      --loopRuns;
      if (loopRuns > 0) batchOver(s.runs[loopRuns - 1]);
    } else {
      batchOver(inner);
    }
  }
  int64_t outer = 1;
  for (size_t i = 0; i < loopRuns; ++i) outer *= s.runs[i].count;
  std::vector<int64_t> idx(loopRuns, 0);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t offA = 0, offB = 0, offC = 0;
    for (size_t i = 0; i < loopRuns; ++i) {
      offA += idx[i] * s.runs[i].strideA;
      offB += idx[i] * s.runs[i].strideB;
      offC += idx[i] * s.runs[i].strideC;
    }
    LtGemm call = g;
    call.a = a + offA, call.b = b + offB, call.c = y + offC;
    if (auto e = ltMatmul(gpu, call)) return e;
    for (size_t i = loopRuns; i-- > 0;) {
      if (++idx[i] < s.runs[i].count) break;
      idx[i] = 0;
    }
  }
  return llvm::Error::success();
}

llvm::Error matMulKernel(GpuKernelContext &ctx) {
  const DeviceTensor *a = ctx.input(0), *b = ctx.input(1);
  DeviceTensor *y = ctx.output(0);
  if (!a || !b || !y) return gpuKernelError("MatMul", "needs two inputs and an output");
  if (auto e = requireF32("MatMul", "A", a)) return e;
  if (auto e = requireF32("MatMul", "B", b)) return e;
  if (auto e = requireF32("MatMul", "Y", y)) return e;
  auto s = matMulShape(a->shape, b->shape, y->shape);
  if (!s) return s.takeError();
  if (y->numel() == 0) return llvm::Error::success();
  return runMatMul(ctx.gpu, *s, a->as<const float>(), b->as<const float>(), y->as<float>(), ctx.workspace,
                   ctx.workspaceBytes, ctx.packCache);
}

// Room to pack both operands to bf16: a call of ltMatmul reads at most all
// of A and all of B (ltMatmul checks, and runs on fp32 operands otherwise).
size_t matMulWorkspace(const GpuKernelContext &ctx) {
  const DeviceTensor *a = ctx.input(0), *b = ctx.input(1);
  if (!a || !b || ctx.gpu.mode != ComputeMode::BF16) return 0;
  return size_t(plan::bf16PackBytes(a->numel(), b->numel()));
}

// --- Gemm: Y = alpha * op(A) * op(B) + beta * C ---

// y[i, j] = c[i or 0, j or 0] for a C of cRows x cCols broadcast to M x N.
__global__ void broadcastCKernel(const float *c, int64_t cRows, int64_t cCols, int64_t M, int64_t N, float *y) {
  const int64_t total = M * N;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / N, j = e % N;
    y[e] = c[(cRows == 1 ? 0 : i * cCols) + (cCols == 1 ? 0 : j)];
  }
}

llvm::Error gemmKernel(GpuKernelContext &ctx) {
  const DeviceTensor *a = ctx.input(0), *b = ctx.input(1), *c = ctx.input(2);
  DeviceTensor *y = ctx.output(0);
  if (!a || !b || !y) return gpuKernelError("Gemm", "needs inputs A and B and an output");
  if (a->shape.size() != 2 || b->shape.size() != 2) return gpuKernelError("Gemm", "A and B must be 2-D");
  for (auto [what, t] : {std::pair<const char *, const DeviceTensor *>{"A", a}, {"B", b}, {"C", c}, {"Y", y}})
    if (t)
      if (auto e = requireF32("Gemm", what, t)) return e;
  const bool transA = ctx.attrs.getInt("transA", 0) != 0, transB = ctx.attrs.getInt("transB", 0) != 0;
  const int64_t M = transA ? a->shape[1] : a->shape[0], K = transA ? a->shape[0] : a->shape[1];
  const int64_t kb = transB ? b->shape[1] : b->shape[0], N = transB ? b->shape[0] : b->shape[1];
  if (kb != K)
    return gpuKernelError("Gemm", "inner dimensions differ: " + shapeToString(a->shape) + " x " +
                                      shapeToString(b->shape));
  if (y->shape != Shape{M, N})
    return gpuKernelError("Gemm", "output " + shapeToString(y->shape) + " does not match the inputs");
  int64_t cRows = 0, cCols = 0;
  if (c) {
    if (c->shape.size() > 2) return gpuKernelError("Gemm", "C must have rank <= 2");
    cRows = c->shape.size() == 2 ? c->shape[0] : 1;
    cCols = c->shape.empty() ? 1 : c->shape.back();
    if ((cRows != 1 && cRows != M) || (cCols != 1 && cCols != N))
      return gpuKernelError("Gemm", "C " + shapeToString(c->shape) + " does not broadcast to [" + llvm::Twine(M) +
                                        "," + llvm::Twine(N) + "]");
  }
  const float alpha = ctx.attrs.getFloat("alpha", 1.0f), beta = ctx.attrs.getFloat("beta", 1.0f);
  if (ctx.accumulateOutput && c) return gpuKernelError("Gemm", "cannot add to its output and read a C");
  if (M == 0 || N == 0) return llvm::Error::success();

  LtGemm g;
  g.m = M, g.n = N, g.k = K;
  g.a = a->as<const float>(), g.lda = transA ? M : K, g.transA = transA;
  g.b = b->as<const float>(), g.ldb = transB ? K : N, g.transB = transB;
  g.c = y->as<float>(), g.ldc = N;
  g.alpha = alpha;
  g.scratch = ctx.workspace, g.scratchBytes = ctx.workspaceBytes;
  g.roundOnce = ctx.outputIsResult;
  g.cacheA = ctx.packCache[0], g.cacheB = ctx.packCache[1];
  if (ctx.accumulateOutput) g.beta = 1; // Y = alpha op(A) op(B) + Y, in place
  const bool useC = c && beta != 0.0f;
  if (useC && beta == 1.0f && cRows == 1 && cCols == N) {
    g.bias = c->as<const float>(); // a row vector: the epilogue adds it
  } else if (useC && cRows == M && cCols == N) {
    g.cIn = c->as<const float>(); // the epilogue reads C where it lies
    g.beta = beta;
  } else if (useC) {
    if (c->data != y->data || cRows != M || cCols != N) {
      broadcastCKernel<<<gridFor(M * N), 256, 0, ctx.gpu.stream>>>(c->as<const float>(), cRows, cCols, M, N,
                                                                   y->as<float>());
      MEGAC_CUDA_LAUNCHED();
    }
    g.beta = beta;
  }
  return ltMatmul(ctx.gpu, g);
}

} // namespace

void registerMatMulGpuKernels() {
  registerGpuKernel("MatMul", matMulKernel, matMulWorkspace);
  registerGpuKernel("Gemm", gemmKernel, matMulWorkspace);
}

} // namespace megac::cuda
