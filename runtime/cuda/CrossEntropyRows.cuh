#pragma once
// The row kernels of softmax cross-entropy, shared by megac.SoftmaxCrossEntropy[Grad]
// (LossKernels.cu) and megac.LinearCrossEntropy[Grad] (LinearCrossEntropyKernels.cu),
// which must agree to the rounding. A block per row computes the
// log-sum-exp in one pass (online max and sum, fp32, float4 loads from each
// row's first 16-byte boundary on).
//
// The definitions have internal linkage (an unnamed namespace): each .cu
// that includes this gets its own copy of the kernels.
#include "runtime/cuda/RowReduce.cuh"

#include <cstdint>

namespace megac::cuda::xent {

namespace {

using namespace rowops;

constexpr unsigned kReduceThreads = 1024;

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
// (or nothing counts), NaN for a target outside [0, V). dx may be logits
// (in place): every element is read, then written, by one thread, after the
// row's log-sum-exp (which synchronizes the block).
template <class Id>
__global__ void __launch_bounds__(1024)
    crossEntropyGradRows(const float *__restrict__ dloss, const float *logits, const Id *__restrict__ targets,
                         const long long *__restrict__ count, float *dx,
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

} // namespace

} // namespace megac::cuda::xent
