// megac.SoftmaxCrossEntropy and megac.SoftmaxCrossEntropyGrad with the CPU
// kernels' semantics (runtime/cpu/TrainingKernels.cpp): logits [..., V],
// int64 (or int32) targets [...], ignore_index (default -100); the loss is
// the mean of logsumexp(row) - row[target] over the non-ignored rows (0 when
// every row is ignored), and the gradient is (softmax(row) - onehot(target))
// * dloss / count on those rows, 0 on ignored ones.
//
// A block per row computes the log-sum-exp in one pass (online max and sum,
// fp32, float4 loads from each row's first 16-byte boundary on). The forward writes each row's
// loss and whether it counts to the workspace; one block then sums them in
// a fixed order (in double), so the loss is bitwise reproducible. The
// gradient first counts the non-ignored rows (one block), then writes rows.
//
// The CPU rejects targets outside [0, V) (other than ignore_index); a
// kernel cannot fail, so here such a row makes the loss NaN and its gradient
// row NaN: a bad target shows up instead of training silently.
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuKernel.h"
#include "runtime/cuda/RowReduce.cuh"

#include <algorithm>
#include <cstdint>

namespace megac::cuda {

namespace {

using namespace rowops;

constexpr size_t kAlign = 256;
constexpr unsigned kReduceThreads = 1024;

size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

unsigned lossThreadsFor(int64_t v) {
  if (v <= 512) return 64;
  if (v <= 4096) return 256;
  if (v <= 32768) return 512;
  return 1024;
}

// A row split at 16-byte boundaries: `head` floats until the row is
// aligned, `body` float4s, then the tail. Without vec4 everything is head.
struct RowSplit {
  int64_t head, body;
};

__device__ __forceinline__ RowSplit splitRow(const float *x, int64_t v, bool vec4) {
  if (!vec4) return {v, 0};
  const int64_t head = min(v, int64_t((16 - (reinterpret_cast<uintptr_t>(x) & 15)) & 15) / 4);
  return {head, (v - head) / 4};
}

// logsumexp of one row, reduced over the block (every thread gets it).
__device__ __forceinline__ float rowLogSumExp(const float *__restrict__ x, int64_t v, bool vec4, MaxSum *scratch) {
  const RowSplit r = splitRow(x, v, vec4);
  MaxSum ms = maxSumIdentity();
  for (int64_t i = threadIdx.x; i < r.head; i += blockDim.x) ms = maxSumAdd(ms, x[i]);
  const float4 *x4 = reinterpret_cast<const float4 *>(x + r.head);
  for (int64_t i = threadIdx.x; i < r.body; i += blockDim.x) {
    const float4 q = x4[i];
    ms = maxSumAdd(maxSumAdd(maxSumAdd(maxSumAdd(ms, q.x), q.y), q.z), q.w);
  }
  for (int64_t i = r.head + 4 * r.body + threadIdx.x; i < v; i += blockDim.x) ms = maxSumAdd(ms, x[i]);
  ms = blockReduce(ms, MaxSumOp(), maxSumIdentity(), scratch);
  return ms.m + logf(ms.s);
}

// rowLoss[r] = lse - x[target] (0 when ignored), rowCounts[r] = 1 unless ignored.
template <class Id>
__global__ void __launch_bounds__(1024)
    crossEntropyRows(const float *__restrict__ logits, const Id *__restrict__ targets, float *__restrict__ rowLoss,
                     int *__restrict__ rowCounts, int64_t v, int64_t ignore, bool vec4) {
  __shared__ MaxSum scratch[32];
  const int64_t row = blockIdx.x;
  const float *x = logits + row * v;
  const float lse = rowLogSumExp(x, v, vec4, scratch);
  if (threadIdx.x != 0) return;
  const int64_t t = int64_t(targets[row]);
  float loss = 0;
  int counts = 0;
  if (t != ignore) {
    counts = 1;
    loss = t >= 0 && t < v ? lse - x[t] : NAN;
  }
  rowLoss[row] = loss;
  rowCounts[row] = counts;
}

// out[0] = sum(rowLoss) / sum(rowCounts), or 0 when nothing counts; one block.
__global__ void __launch_bounds__(1024)
    crossEntropyMean(const float *__restrict__ rowLoss, const int *__restrict__ rowCounts, int64_t rows,
                     float *__restrict__ out) {
  __shared__ double sumScratch[32];
  __shared__ long long countScratch[32];
  double sum = 0;
  long long count = 0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    sum += double(rowLoss[i]);
    count += rowCounts[i];
  }
  sum = blockReduce(sum, AddOp(), 0.0, sumScratch);
  count = blockReduce(count, AddOp(), 0LL, countScratch);
  if (threadIdx.x == 0) out[0] = count ? float(sum / double(count)) : 0.f;
}

// count[0] = number of rows whose target is not ignore_index; one block.
template <class Id>
__global__ void __launch_bounds__(1024)
    countTargets(const Id *__restrict__ targets, int64_t rows, int64_t ignore, long long *__restrict__ count) {
  __shared__ long long scratch[32];
  long long c = 0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) c += int64_t(targets[i]) != ignore;
  c = blockReduce(c, AddOp(), 0LL, scratch);
  if (threadIdx.x == 0) count[0] = c;
}

// dx row = (exp(x - lse) - onehot(t)) * dloss / count; zeros when ignored
// (or nothing counts), NaN for a target outside [0, V).
template <class Id>
__global__ void __launch_bounds__(1024)
    crossEntropyGradRows(const float *__restrict__ dloss, const float *__restrict__ logits,
                         const Id *__restrict__ targets, const long long *__restrict__ count, float *__restrict__ dx,
                         int64_t v, int64_t ignore, bool vec4) {
  __shared__ MaxSum scratch[32];
  const int64_t row = blockIdx.x, t = int64_t(targets[row]);
  const float *x = logits + row * v;
  float *d = dx + row * v;
  const long long c = *count;
  if (t == ignore || c == 0 || t < 0 || t >= v) { // uniform over the block
    const float fill = t == ignore || c == 0 ? 0.f : NAN;
    for (int64_t i = threadIdx.x; i < v; i += blockDim.x) d[i] = fill;
    return;
  }
  const float lse = rowLogSumExp(x, v, vec4, scratch);
  const float scale = float(double(dloss[0]) / double(c));
  auto grad = [&](int64_t i, float xi) { return expf(xi - lse) * scale - (i == t ? scale : 0.f); };
  const RowSplit r = splitRow(x, v, vec4); // d has x's alignment where vec4
  for (int64_t i = threadIdx.x; i < r.head; i += blockDim.x) d[i] = grad(i, x[i]);
  const float4 *x4 = reinterpret_cast<const float4 *>(x + r.head);
  float4 *d4 = reinterpret_cast<float4 *>(d + r.head);
  for (int64_t i = threadIdx.x; i < r.body; i += blockDim.x) {
    const float4 q = x4[i];
    const int64_t e = r.head + 4 * i;
    d4[i] = {grad(e, q.x), grad(e + 1, q.y), grad(e + 2, q.z), grad(e + 3, q.w)};
  }
  for (int64_t i = r.head + 4 * r.body + threadIdx.x; i < v; i += blockDim.x) d[i] = grad(i, x[i]);
}

// Rows, vocabulary and the checks both ops share.
struct CrossEntropyDims {
  int64_t rows = 0, v = 0;
};

llvm::Expected<CrossEntropyDims> crossEntropyDims(llvm::StringRef op, const DeviceTensor *logits,
                                                  const DeviceTensor *targets) {
  if (!logits || !targets) return gpuKernelError(op, "needs logits and targets");
  if (logits->dtype != DType::F32)
    return gpuKernelError(op, llvm::Twine("unsupported element type ") + dtypeName(logits->dtype) + " on the GPU");
  if (targets->dtype != DType::I64 && targets->dtype != DType::I32)
    return gpuKernelError(op, llvm::Twine("targets of type ") + dtypeName(targets->dtype) +
                                  " are not supported on the GPU (int64 or int32)");
  if (logits->shape.empty()) return gpuKernelError(op, "logits must have rank >= 1");
  CrossEntropyDims d;
  d.v = logits->shape.back();
  d.rows = logits->numel() / std::max<int64_t>(d.v, 1);
  if (d.rows > 0 && targets->numel() != d.rows)
    return gpuKernelError(op, "targets " + shapeToString(targets->shape) + " do not match logits " +
                                  shapeToString(logits->shape));
  return d;
}

size_t crossEntropyWorkspace(const GpuKernelContext &ctx) {
  const DeviceTensor *logits = ctx.input(0);
  if (!logits || logits->shape.empty()) return 0;
  const int64_t rows = logits->numel() / std::max<int64_t>(logits->shape.back(), 1);
  return alignUp(size_t(rows) * sizeof(float)) + alignUp(size_t(rows) * sizeof(int));
}

llvm::Error crossEntropy(GpuKernelContext &ctx) {
  const char *op = "megac.SoftmaxCrossEntropy";
  const DeviceTensor *logits = ctx.input(0), *targets = ctx.input(1), *out = ctx.output(0);
  auto d = crossEntropyDims(op, logits, targets);
  if (!d) return d.takeError();
  if (!out || out->dtype != DType::F32 || out->numel() != 1) return gpuKernelError(op, "output must be an f32 scalar");
  const size_t lossBytes = alignUp(size_t(d->rows) * sizeof(float));
  if (d->rows > 0 && (!ctx.workspace || ctx.workspaceBytes < lossBytes + alignUp(size_t(d->rows) * sizeof(int))))
    return gpuKernelError(op, "workspace is smaller than the loss needs");
  float *rowLoss = static_cast<float *>(ctx.workspace);
  int *rowCounts = reinterpret_cast<int *>(static_cast<char *>(ctx.workspace) + lossBytes);
  const int64_t ignore = ctx.attrs.getInt("ignore_index", -100);
  cudaStream_t stream = ctx.gpu.stream;
  if (d->rows > 0) {
    const unsigned threads = lossThreadsFor(d->v);
    if (targets->dtype == DType::I32)
      crossEntropyRows<int32_t><<<unsigned(d->rows), threads, 0, stream>>>(
          logits->as<float>(), targets->as<int32_t>(), rowLoss, rowCounts, d->v, ignore, /*vec4=*/true);
    else
      crossEntropyRows<int64_t><<<unsigned(d->rows), threads, 0, stream>>>(
          logits->as<float>(), targets->as<int64_t>(), rowLoss, rowCounts, d->v, ignore, /*vec4=*/true);
    MEGAC_CUDA_LAUNCHED();
  }
  crossEntropyMean<<<1, kReduceThreads, 0, stream>>>(rowLoss, rowCounts, d->rows, out->as<float>());
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

size_t crossEntropyGradWorkspace(const GpuKernelContext &) { return alignUp(sizeof(long long)); }

llvm::Error crossEntropyGrad(GpuKernelContext &ctx) {
  const char *op = "megac.SoftmaxCrossEntropyGrad";
  const DeviceTensor *dloss = ctx.input(0), *logits = ctx.input(1), *targets = ctx.input(2), *dx = ctx.output(0);
  auto d = crossEntropyDims(op, logits, targets);
  if (!d) return d.takeError();
  if (!dloss || dloss->dtype != DType::F32 || dloss->numel() != 1)
    return gpuKernelError(op, "dloss must be an f32 scalar");
  if (!dx || dx->dtype != DType::F32 || dx->shape != logits->shape)
    return gpuKernelError(op, "dlogits must have the logits' type " + shapeToString(logits->shape));
  if (!ctx.workspace || ctx.workspaceBytes < sizeof(long long))
    return gpuKernelError(op, "workspace is smaller than the gradient needs");
  if (d->rows == 0 || d->v == 0) return llvm::Error::success();
  long long *count = static_cast<long long *>(ctx.workspace);
  const int64_t ignore = ctx.attrs.getInt("ignore_index", -100);
  // float4 stores need dlogits' rows aligned like the logits'.
  const bool vec4 = (uintptr_t(dx->data) - uintptr_t(logits->data)) % 16 == 0;
  const unsigned threads = lossThreadsFor(d->v);
  cudaStream_t stream = ctx.gpu.stream;
  if (targets->dtype == DType::I32) {
    countTargets<int32_t><<<1, kReduceThreads, 0, stream>>>(targets->as<int32_t>(), d->rows, ignore, count);
    MEGAC_CUDA_LAUNCHED();
    crossEntropyGradRows<int32_t><<<unsigned(d->rows), threads, 0, stream>>>(
        dloss->as<float>(), logits->as<float>(), targets->as<int32_t>(), count, dx->as<float>(), d->v, ignore, vec4);
  } else {
    countTargets<int64_t><<<1, kReduceThreads, 0, stream>>>(targets->as<int64_t>(), d->rows, ignore, count);
    MEGAC_CUDA_LAUNCHED();
    crossEntropyGradRows<int64_t><<<unsigned(d->rows), threads, 0, stream>>>(
        dloss->as<float>(), logits->as<float>(), targets->as<int64_t>(), count, dx->as<float>(), d->v, ignore, vec4);
  }
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

} // namespace

void registerLossGpuKernels() {
  registerGpuKernel("megac.SoftmaxCrossEntropy", crossEntropy, crossEntropyWorkspace);
  registerGpuKernel("megac.SoftmaxCrossEntropyGrad", crossEntropyGrad, crossEntropyGradWorkspace);
}

} // namespace megac::cuda
