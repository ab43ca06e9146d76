// Softmax and LogSoftmax along any axis, and their fused gradients
// megac.SoftmaxGrad / megac.LogSoftmaxGrad, with the CPU kernels' semantics
// (runtime/cpu/SoftmaxKernels.cpp, NNGradKernels.cpp); fp32 throughout.
//
// The input is [outer, n, inner] with the softmax over n. Along the last axis
// (inner == 1) a warp (rows up to 256) or a block of up to 1024 threads
// handles a row; rows up to 8K are read once into registers, longer ones
// are streamed (one pass for the running max and sum of exp, one to write),
// split across blocks when there are too few rows to fill the GPU. Along
// another axis a thread handles a column (coalesced across threads).
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuKernel.h"
#include "runtime/cuda/RowReduce.cuh"

#include <algorithm>

namespace megac::cuda {

namespace {

using namespace rowops;

struct SoftmaxDims {
  int64_t outer = 1, n = 1, inner = 1;
};

// The CPU's axis rule: forward ops accept axis in [-max(rank,1), max(rank,1)),
// the gradients [-rank, max(rank,1)).
llvm::Expected<SoftmaxDims> softmaxDims(llvm::StringRef op, const Shape &shape, int64_t axis, bool forward) {
  const int64_t rank = int64_t(shape.size()), hi = std::max<int64_t>(rank, 1), lo = forward ? -hi : -rank;
  if (axis < lo || axis >= hi)
    return gpuKernelError(op, "axis " + llvm::Twine(axis) + " is out of range for rank " + llvm::Twine(rank));
  if (axis < 0) axis += rank;
  SoftmaxDims s;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) s.outer *= shape[size_t(d)];
    else if (d == axis) s.n = shape[size_t(d)];
    else s.inner *= shape[size_t(d)];
  }
  return s;
}

// Rows that fit in registers (perThread elements a thread): read once;
// the max, then the sum of exp(x - max), as on the CPU.
template <bool kWarpPerRow, int kPer, bool kLog>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmaxRowsCached(const float *__restrict__ x, float *__restrict__ y, int64_t rows, int64_t n) {
  __shared__ float scratch[32];
  const RowThreads<kWarpPerRow> t;
  if (t.row >= rows) return; // uniform over the group
  const float *xr = x + t.row * n;
  float *yr = y + t.row * n;
  float v[kPer];
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = t.tid + j * t.count;
    v[j] = i < n ? xr[i] : -INFINITY;
    m = fmaxf(m, v[j]);
  }
  m = groupReduce<kWarpPerRow>(m, MaxOp(), -INFINITY, scratch);
  float sum = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = t.tid + j * t.count;
    const float e = expf(v[j] - m);
    if (i < n) sum += e;
    if (!kLog) v[j] = e;
  }
  sum = groupReduce<kWarpPerRow>(sum, AddOp(), 0.f, scratch);
  const float logSum = kLog ? logf(sum) : 0.f, inv = kLog ? 0.f : 1.f / sum;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = t.tid + j * t.count;
    if (i < n) yr[i] = kLog ? (v[j] - m) - logSum : v[j] * inv;
  }
}

// Long rows, streamed: a block per (row, split) over the split's chunk. With
// one split the block finishes the row itself: one pass for the running max
// and sum of exp (online), one to write. With several (few long rows), a
// first kernel leaves each chunk's (max, sum) in `stats` and a second
// combines the row's chunks in order and writes.
__device__ __forceinline__ MaxSum chunkStats(const float *__restrict__ xr, int64_t begin, int64_t end,
                                             MaxSum *scratch) {
  MaxSum ms = maxSumIdentity();
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) ms = maxSumAdd(ms, xr[i]);
  return blockReduce(ms, MaxSumOp(), maxSumIdentity(), scratch);
}

template <bool kLog>
__device__ __forceinline__ void writeChunk(const float *__restrict__ xr, float *__restrict__ yr, int64_t begin,
                                           int64_t end, MaxSum ms) {
  if constexpr (kLog) {
    const float logSum = logf(ms.s);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) yr[i] = (xr[i] - ms.m) - logSum;
  } else {
    const float inv = 1.f / ms.s;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) yr[i] = expf(xr[i] - ms.m) * inv;
  }
}

template <bool kLog>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmaxRowsStreamed(const float *__restrict__ x, float *__restrict__ y, int64_t n) {
  __shared__ MaxSum scratch[32];
  const int64_t row = blockIdx.x;
  const MaxSum ms = chunkStats(x + row * n, 0, n, scratch);
  writeChunk<kLog>(x + row * n, y + row * n, 0, n, ms);
}

__global__ void __launch_bounds__(kMaxRowThreads)
    softmaxChunkStats(const float *__restrict__ x, MaxSum *__restrict__ stats, int64_t n, int64_t splits,
                      int64_t chunk) {
  __shared__ MaxSum scratch[32];
  const int64_t b = blockIdx.x, row = b / splits, begin = (b % splits) * chunk;
  const MaxSum ms = chunkStats(x + row * n, begin, min(n, begin + chunk), scratch);
  if (threadIdx.x == 0) stats[b] = ms;
}

template <bool kLog>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmaxChunkWrite(const float *__restrict__ x, float *__restrict__ y, const MaxSum *__restrict__ stats, int64_t n,
                      int64_t splits, int64_t chunk) {
  const int64_t b = blockIdx.x, row = b / splits, begin = (b % splits) * chunk;
  MaxSum ms = maxSumIdentity();
  for (int64_t s = 0; s < splits; ++s) ms = maxSumCombine(ms, stats[row * splits + s]);
  writeChunk<kLog>(x + row * n, y + row * n, begin, min(n, begin + chunk), ms);
}

// A thread per (outer, inner) column, the softmax over n elements `inner` apart.
template <bool kLog>
__global__ void softmaxCols(const float *__restrict__ x, float *__restrict__ y, int64_t outer, int64_t n,
                            int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    MaxSum ms = maxSumIdentity();
    for (int64_t k = 0; k < n; ++k) ms = maxSumAdd(ms, x[base + k * inner]);
    if constexpr (kLog) {
      const float logSum = logf(ms.s);
      for (int64_t k = 0; k < n; ++k) y[base + k * inner] = (x[base + k * inner] - ms.m) - logSum;
    } else {
      const float inv = 1.f / ms.s;
      for (int64_t k = 0; k < n; ++k) y[base + k * inner] = expf(x[base + k * inner] - ms.m) * inv;
    }
  }
}

// dX = Y * (dY - sum(dY * Y))          (softmax)
// dX = dY - exp(Y) * sum(dY)           (log-softmax)
template <bool kLog> __device__ __forceinline__ float gradTerm(float g, float p) { return kLog ? g : g * p; }
template <bool kLog> __device__ __forceinline__ float gradOut(float g, float p, float s) {
  return kLog ? g - expf(p) * s : p * (g - s);
}

// kPer > 0: the row is held in registers (kPer elements a thread); kPer == 0:
// streamed (long rows, a block each).
template <bool kWarpPerRow, int kPer, bool kLog>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmaxGradRows(const float *__restrict__ dy, const float *__restrict__ y, float *__restrict__ dx, int64_t rows,
                    int64_t n) {
  __shared__ float scratch[32];
  const RowThreads<kWarpPerRow> t;
  if (t.row >= rows) return;
  const float *g = dy + t.row * n, *p = y + t.row * n;
  float *out = dx + t.row * n;
  if constexpr (kPer > 0) {
    float gv[kPer], pv[kPer], s = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = t.tid + j * t.count;
      gv[j] = i < n ? g[i] : 0.f;
      pv[j] = i < n ? p[i] : 0.f;
      s += gradTerm<kLog>(gv[j], pv[j]);
    }
    s = groupReduce<kWarpPerRow>(s, AddOp(), 0.f, scratch);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = t.tid + j * t.count;
      if (i < n) out[i] = gradOut<kLog>(gv[j], pv[j], s);
    }
  } else {
    float s = 0;
    for (int64_t i = t.tid; i < n; i += t.count) s += gradTerm<kLog>(g[i], p[i]);
    s = groupReduce<kWarpPerRow>(s, AddOp(), 0.f, scratch);
    for (int64_t i = t.tid; i < n; i += t.count) out[i] = gradOut<kLog>(g[i], p[i], s);
  }
}

template <bool kLog>
__global__ void softmaxGradCols(const float *__restrict__ dy, const float *__restrict__ y, float *__restrict__ dx,
                                int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    float s = 0;
    for (int64_t k = 0; k < n; ++k) s += gradTerm<kLog>(dy[base + k * inner], y[base + k * inner]);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = base + k * inner;
      dx[i] = gradOut<kLog>(dy[i], y[i], s);
    }
  }
}

llvm::Error requireF32(llvm::StringRef op, std::initializer_list<const DeviceTensor *> ts) {
  for (const DeviceTensor *t : ts)
    if (t->dtype != DType::F32)
      return gpuKernelError(op, llvm::Twine("unsupported element type ") + dtypeName(t->dtype) + " on the GPU");
  return llvm::Error::success();
}

// Long rows that are too few to fill the GPU are split across blocks.
constexpr int64_t kFewRows = 264; // two blocks per multiprocessor of an H200

int64_t softmaxSplits(const SoftmaxDims &d) {
  if (d.inner != 1 || rowLaunchFor(d.n).perThread > 0 || d.outer >= kFewRows) return 1;
  return std::max<int64_t>(1, std::min((2 * kFewRows + d.outer - 1) / d.outer, (d.n + 8191) / 8192));
}

llvm::Error softmaxSetup(llvm::StringRef op, const GpuKernelContext &ctx, SoftmaxDims &d) {
  const DeviceTensor *x = ctx.input(0), *y = ctx.output(0);
  if (!x || !y) return gpuKernelError(op, "needs an input and an output");
  if (y->shape != x->shape || y->dtype != x->dtype) return gpuKernelError(op, "output type does not match the input");
  if (auto e = requireF32(op, {x})) return e;
  auto dims = softmaxDims(op, x->shape, ctx.attrs.getInt("axis", -1), /*forward=*/true);
  if (!dims) return dims.takeError();
  d = *dims;
  return llvm::Error::success();
}

template <bool kLog> size_t softmaxWorkspace(const GpuKernelContext &ctx) {
  SoftmaxDims d;
  if (llvm::Error e = softmaxSetup("Softmax", ctx, d)) {
    llvm::consumeError(std::move(e));
    return 0;
  }
  const int64_t splits = softmaxSplits(d);
  return splits > 1 ? size_t(d.outer * splits) * sizeof(MaxSum) : 0;
}

template <bool kLog> llvm::Error softmaxKernel(GpuKernelContext &ctx) {
  const char *op = kLog ? "LogSoftmax" : "Softmax";
  SoftmaxDims d;
  if (auto e = softmaxSetup(op, ctx, d)) return e;
  const DeviceTensor &x = *ctx.input(0), &y = *ctx.output(0);
  if (x.numel() == 0) return llvm::Error::success();
  cudaStream_t stream = ctx.gpu.stream;
  const float *xp = x.as<float>();
  float *yp = y.as<float>();
  if (d.inner != 1) {
    softmaxCols<kLog><<<gridFor(d.outer * d.inner), 256, 0, stream>>>(xp, yp, d.outer, d.n, d.inner);
    MEGAC_CUDA_LAUNCHED();
    return llvm::Error::success();
  }
  const RowLaunch l = rowLaunchFor(d.n);
  if (l.perThread > 0) {
    auto launch = [&](auto warp, auto per) {
      constexpr bool kWarp = decltype(warp)::value;
      constexpr int kPer = decltype(per)::value;
      if constexpr (kPer > 0)
        softmaxRowsCached<kWarp, kPer, kLog><<<rowBlocks(d.outer, l), l.threads, 0, stream>>>(xp, yp, d.outer, d.n);
    };
    withWarpPerRow(l.warpPerRow, [&](auto warp) { withPerThread(l.perThread, [&](auto per) { launch(warp, per); }); });
    MEGAC_CUDA_LAUNCHED();
    return llvm::Error::success();
  }
  const int64_t splits = softmaxSplits(d);
  if (splits == 1) {
    softmaxRowsStreamed<kLog><<<unsigned(d.outer), l.threads, 0, stream>>>(xp, yp, d.n);
    MEGAC_CUDA_LAUNCHED();
    return llvm::Error::success();
  }
  if (!ctx.workspace || ctx.workspaceBytes < size_t(d.outer * splits) * sizeof(MaxSum))
    return gpuKernelError(op, "workspace is smaller than the softmax needs");
  MaxSum *stats = static_cast<MaxSum *>(ctx.workspace);
  const int64_t chunk = (d.n + splits - 1) / splits;
  softmaxChunkStats<<<unsigned(d.outer * splits), l.threads, 0, stream>>>(xp, stats, d.n, splits, chunk);
  MEGAC_CUDA_LAUNCHED();
  softmaxChunkWrite<kLog><<<unsigned(d.outer * splits), l.threads, 0, stream>>>(xp, yp, stats, d.n, splits, chunk);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

template <bool kLog> llvm::Error softmaxGradKernel(GpuKernelContext &ctx) {
  const char *op = kLog ? "megac.LogSoftmaxGrad" : "megac.SoftmaxGrad";
  const DeviceTensor *dy = ctx.input(0), *y = ctx.input(1), *dx = ctx.output(0);
  if (!dy || !y || !dx) return gpuKernelError(op, "needs dY, Y and an output");
  if (dy->shape != y->shape)
    return gpuKernelError(op, "dY has shape " + shapeToString(dy->shape) + ", expected " + shapeToString(y->shape));
  if (dx->shape != y->shape)
    return gpuKernelError(op, "dX has shape " + shapeToString(dx->shape) + ", expected " + shapeToString(y->shape));
  if (auto e = requireF32(op, {dy, y, dx})) return e;
  auto d = softmaxDims(op, y->shape, ctx.attrs.getInt("axis", -1), /*forward=*/false);
  if (!d) return d.takeError();
  if (y->numel() == 0) return llvm::Error::success();
  cudaStream_t stream = ctx.gpu.stream;
  const float *g = dy->as<float>(), *p = y->as<float>();
  float *out = dx->as<float>();
  if (d->inner == 1) {
    const RowLaunch l = rowLaunchFor(d->n);
    auto launch = [&](auto warp, auto per) {
      constexpr bool kWarp = decltype(warp)::value;
      constexpr int kPer = decltype(per)::value;
      softmaxGradRows<kWarp, kPer, kLog><<<rowBlocks(d->outer, l), l.threads, 0, stream>>>(g, p, out, d->outer, d->n);
    };
    withWarpPerRow(l.warpPerRow, [&](auto warp) { withPerThread(l.perThread, [&](auto per) { launch(warp, per); }); });
  } else {
    softmaxGradCols<kLog><<<gridFor(d->outer * d->inner), 256, 0, stream>>>(g, p, out, d->outer, d->n, d->inner);
  }
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

} // namespace

void registerSoftmaxGpuKernels() {
  registerGpuKernel("Softmax", softmaxKernel<false>, softmaxWorkspace<false>);
  registerGpuKernel("LogSoftmax", softmaxKernel<true>, softmaxWorkspace<true>);
  registerGpuKernel("megac.SoftmaxGrad", softmaxGradKernel<false>);
  registerGpuKernel("megac.LogSoftmaxGrad", softmaxGradKernel<true>);
}

} // namespace megac::cuda
