// megac.SoftmaxCrossEntropy and megac.SoftmaxCrossEntropyGrad with the CPU
// kernels' semantics (runtime/cpu/TrainingKernels.cpp): logits [..., V],
// int64 (or int32) targets [...], ignore_index (default -100); the loss is
// the mean of logsumexp(row) - row[target] over the non-ignored rows (0 when
// every row is ignored), and the gradient is (softmax(row) - onehot(target))
// * dloss / count on those rows, 0 on ignored ones.
//
// The row kernels (CrossEntropyRows.cuh, shared with megac.LinearCrossEntropy):
// a block per row computes the log-sum-exp in one pass. The forward writes
// each row's loss and whether it counts to the workspace; one block then
// sums them in a fixed order (in double), so the loss is bitwise
// reproducible. The gradient first counts the non-ignored rows (one block),
// then writes rows.
//
// The CPU rejects targets outside [0, V) (other than ignore_index); a
// kernel cannot fail, so here such a row makes the loss NaN and its gradient
// row NaN: a bad target shows up instead of training silently.
#include "runtime/cuda/CrossEntropyRows.cuh"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuKernel.h"

#include <algorithm>
#include <cstdint>

namespace megac::cuda {

namespace {

using namespace xent;

constexpr size_t kAlign = 256;

size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

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
