// megac.LinearCrossEntropy and megac.LinearCrossEntropyGrad with the CPU
// kernels' semantics (runtime/cpu/LinearCrossEntropyKernels.cpp): the head's
// product and the softmax cross-entropy, a chunk of rows at a time
// (plan::linearCrossEntropyChunkRows), so only one chunk of fp32 logits
// exists, in the workspace.
//
// Forward, per chunk: logits = h_c W (ltMatmul), then each row's loss and
// whether it counts (the row kernel of megac.SoftmaxCrossEntropy) into
// per-row arrays over all rows; after the last chunk one block sums them in
// row order: the loss is bitwise reproducible, whatever the chunking.
// Gradient: count the non-ignored rows once; per chunk recompute the
// logits, turn them in place into dl = (softmax - onehot) * dloss / count,
// then dh_c = dl W^T and dW (+)= h_c^T dl (dl^T h_c with trans_w).
//
// In bf16 mode W is packed to bf16 once per op and every product reads that
// copy (ltMatmul packs only the chunk operands), instead of packing W per chunk.
// The workspace layout is plan::linearCrossEntropyWorkspaceBytes's, the
// planner's WORKSPACE budget for these ops.
#include "runtime/cuda/CrossEntropyRows.cuh"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuKernel.h"
#include "runtime/cuda/LtMatmul.h"
#include "runtime/cuda/WorkspaceCarver.h"
#include "runtime/plan/StreamLayout.h"

#include <algorithm>

namespace megac::cuda {

namespace {

using namespace xent;

struct Dims {
  int64_t rows = 0, hidden = 0, vocab = 0, chunk = 1;
  bool transW = false, bf16 = false;
};

// Shapes only (data pointers may be null while sizing the workspace).
llvm::Expected<Dims> dims(llvm::StringRef op, const GpuKernelContext &ctx, size_t first) {
  const DeviceTensor *h = ctx.input(first), *w = ctx.input(first + 1), *targets = ctx.input(first + 2);
  if (!h || !w || !targets) return gpuKernelError(op, "needs h, W and targets");
  if (h->dtype != DType::F32 || w->dtype != DType::F32)
    return gpuKernelError(op, llvm::Twine("h and W must be f32 on the GPU, got ") + dtypeName(h->dtype) + " and " +
                                  dtypeName(w->dtype));
  if (targets->dtype != DType::I64 && targets->dtype != DType::I32)
    return gpuKernelError(op, llvm::Twine("targets of type ") + dtypeName(targets->dtype) +
                                  " are not supported on the GPU (int64 or int32)");
  if (h->shape.empty() || w->shape.size() != 2) return gpuKernelError(op, "expected h [..., H] and a 2-D W");
  Dims d;
  d.transW = ctx.attrs.getInt("trans_w", 0) != 0;
  d.hidden = h->shape.back();
  d.vocab = w->shape[d.transW ? 0 : 1];
  if (w->shape[d.transW ? 1 : 0] != d.hidden)
    return gpuKernelError(op, "h " + shapeToString(h->shape) + " and W " + shapeToString(w->shape) +
                                  " differ in the hidden size");
  d.rows = h->numel() / std::max<int64_t>(d.hidden, 1);
  if (targets->numel() != d.rows)
    return gpuKernelError(op, "targets " + shapeToString(targets->shape) + " do not match h " +
                                  shapeToString(h->shape));
  d.chunk = plan::linearCrossEntropyChunkRows(d.rows, d.vocab, ctx.attrs.getInt("chunk_rows", 0));
  d.bf16 = ctx.gpu.mode == ComputeMode::BF16;
  return d;
}

size_t workspaceFor(const GpuKernelContext &ctx, bool grad) {
  auto d = dims(grad ? "megac.LinearCrossEntropyGrad" : "megac.LinearCrossEntropy", ctx, grad ? 1 : 0);
  if (!d) {
    llvm::consumeError(d.takeError()); // the kernel reports it
    return 0;
  }
  return size_t(plan::linearCrossEntropyWorkspaceBytes(grad, d->rows, d->hidden, d->vocab,
                                                       ctx.attrs.getInt("chunk_rows", 0), d->bf16));
}

size_t forwardWorkspace(const GpuKernelContext &ctx) { return workspaceFor(ctx, false); }
size_t gradWorkspace(const GpuKernelContext &ctx) { return workspaceFor(ctx, true); }

// The scratch both ops share: the chunk's logits first, the bf16 pieces last.
struct Scratch {
  float *logits = nullptr;
  void *wPacked = nullptr; // bf16 W (bf16 mode)
  void *gemm = nullptr;    // ltMatmul's packing room (bf16 mode)
  size_t gemmBytes = 0;
};

void carveBf16(const Dims &d, bool grad, WorkspaceCarver &ws, Scratch &s) {
  if (!d.bf16) return;
  s.wPacked = ws.take<char>(plan::bf16PackBytes(d.hidden * d.vocab, 0));
  s.gemmBytes = size_t(grad ? plan::bf16PackBytes(d.chunk * d.hidden, d.chunk * d.vocab)
                            : plan::bf16PackBytes(d.chunk * d.hidden, 0));
  s.gemm = ws.take<char>(int64_t(s.gemmBytes));
}

// logits[0, n) = h rows [r0, r0 + n) times W.
llvm::Error chunkLogits(GpuContext &gpu, const Dims &d, const Scratch &s, const float *h, const float *w, int64_t r0,
                        int64_t n) {
  LtGemm g;
  g.m = n, g.n = d.vocab, g.k = d.hidden;
  g.a = h + r0 * d.hidden, g.lda = d.hidden;
  g.b = w, g.transB = d.transW, g.ldb = d.transW ? d.hidden : d.vocab, g.bPackedBf16 = s.wPacked;
  g.c = s.logits, g.ldc = d.vocab;
  g.scratch = s.gemm, g.scratchBytes = s.gemmBytes;
  return ltMatmul(gpu, g);
}

// W's bf16 copy: the weight slot's (GpuContext::weightCopies), else packed here.
llvm::Error packW(GpuContext &gpu, const Dims &d, Scratch &s, const float *w) {
  if (!s.wPacked) return llvm::Error::success();
  if (const void *copy = weightCopyOf(gpu, w, d.hidden * d.vocab)) {
    s.wPacked = const_cast<void *>(copy);
    return llvm::Error::success();
  }
  return ltPackBf16(gpu, s.wPacked, w, d.hidden * d.vocab);
}

template <class Id>
llvm::Error forwardChunks(GpuKernelContext &ctx, const Dims &d, const Scratch &s, float *rowLoss, int *rowCounts) {
  const float *h = ctx.input(0)->as<const float>(), *w = ctx.input(1)->as<const float>();
  const Id *targets = ctx.input(2)->as<const Id>();
  const int64_t ignore = ctx.attrs.getInt("ignore_index", -100);
  for (int64_t r0 = 0; r0 < d.rows; r0 += d.chunk) {
    const int64_t n = std::min(d.chunk, d.rows - r0);
    if (auto e = chunkLogits(ctx.gpu, d, s, h, w, r0, n)) return e;
    crossEntropyRows<Id><<<unsigned(n), lossThreadsFor(d.vocab), 0, ctx.gpu.stream>>>(
        s.logits, targets + r0, rowLoss + r0, rowCounts + r0, d.vocab, ignore, /*vec4=*/true);
    MEGAC_CUDA_LAUNCHED();
  }
  return llvm::Error::success();
}

llvm::Error forward(GpuKernelContext &ctx) {
  const char *op = "megac.LinearCrossEntropy";
  auto d = dims(op, ctx, 0);
  if (!d) return d.takeError();
  const DeviceTensor *out = ctx.output(0);
  if (!out || out->dtype != DType::F32 || out->numel() != 1) return gpuKernelError(op, "output must be an f32 scalar");
  const size_t need = forwardWorkspace(ctx);
  if (!ctx.workspace || ctx.workspaceBytes < need) return gpuKernelError(op, "workspace is smaller than the loss needs");
  WorkspaceCarver ws(ctx.workspace);
  Scratch s;
  s.logits = ws.take<float>(d->chunk * d->vocab);
  float *rowLoss = ws.take<float>(d->rows);
  int *rowCounts = ws.take<int>(d->rows);
  carveBf16(*d, false, ws, s);
  if (d->rows > 0 && d->vocab > 0) {
    if (auto e = packW(ctx.gpu, *d, s, ctx.input(1)->as<const float>())) return e;
    if (auto e = ctx.input(2)->dtype == DType::I32 ? forwardChunks<int32_t>(ctx, *d, s, rowLoss, rowCounts)
                                                   : forwardChunks<int64_t>(ctx, *d, s, rowLoss, rowCounts))
      return e;
  }
  // With V == 0 every counted row's loss is NaN on the CPU too (an empty
  // vocabulary has no valid target); here the rows were never written.
  const int64_t summed = d->vocab > 0 ? d->rows : 0;
  crossEntropyMean<<<1, kReduceThreads, 0, ctx.gpu.stream>>>(rowLoss, rowCounts, summed, out->as<float>());
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

template <class Id> llvm::Error gradChunks(GpuKernelContext &ctx, const Dims &d, const Scratch &s, long long *count) {
  const float *dloss = ctx.input(0)->as<const float>(), *h = ctx.input(1)->as<const float>(),
              *w = ctx.input(2)->as<const float>();
  const Id *targets = ctx.input(3)->as<const Id>();
  float *dh = ctx.output(0)->as<float>(), *dw = ctx.output(1)->as<float>();
  const int64_t ignore = ctx.attrs.getInt("ignore_index", -100), H = d.hidden, V = d.vocab;
  cudaStream_t stream = ctx.gpu.stream;
  countTargets<Id><<<1, kReduceThreads, 0, stream>>>(targets, d.rows, ignore, count);
  MEGAC_CUDA_LAUNCHED();
  for (int64_t r0 = 0; r0 < d.rows; r0 += d.chunk) {
    const int64_t n = std::min(d.chunk, d.rows - r0);
    if (auto e = chunkLogits(ctx.gpu, d, s, h, w, r0, n)) return e;
    crossEntropyGradRows<Id><<<unsigned(n), lossThreadsFor(V), 0, stream>>>(dloss, s.logits, targets + r0, count,
                                                                            s.logits, V, ignore, /*vec4=*/true);
    MEGAC_CUDA_LAUNCHED();
    // dh_c = dl W^T: W stored [H, V] read transposed, or [V, H] as is.
    LtGemm gh;
    gh.m = n, gh.n = H, gh.k = V;
    gh.a = s.logits, gh.lda = V;
    gh.b = w, gh.transB = !d.transW, gh.ldb = d.transW ? H : V, gh.bPackedBf16 = s.wPacked;
    gh.c = dh + r0 * H, gh.ldc = H;
    gh.scratch = s.gemm, gh.scratchBytes = s.gemmBytes;
    if (auto e = ltMatmul(ctx.gpu, gh)) return e;
    // dW (+)= h_c^T dl ([H, V]), or dl^T h_c ([V, H]); the first chunk overwrites.
    LtGemm gw;
    gw.transA = true;
    if (d.transW) {
      gw.m = V, gw.n = H, gw.k = n;
      gw.a = s.logits, gw.lda = V, gw.b = h + r0 * H, gw.ldb = H, gw.c = dw, gw.ldc = H;
    } else {
      gw.m = H, gw.n = V, gw.k = n;
      gw.a = h + r0 * H, gw.lda = H, gw.b = s.logits, gw.ldb = V, gw.c = dw, gw.ldc = V;
    }
    gw.beta = r0 == 0 ? 0.f : 1.f;
    gw.scratch = s.gemm, gw.scratchBytes = s.gemmBytes;
    if (auto e = ltMatmul(ctx.gpu, gw)) return e;
  }
  return llvm::Error::success();
}

llvm::Error grad(GpuKernelContext &ctx) {
  const char *op = "megac.LinearCrossEntropyGrad";
  auto d = dims(op, ctx, 1);
  if (!d) return d.takeError();
  const DeviceTensor *dloss = ctx.input(0), *dh = ctx.output(0), *dw = ctx.output(1);
  if (!dloss || dloss->dtype != DType::F32 || dloss->numel() != 1)
    return gpuKernelError(op, "dloss must be an f32 scalar");
  if (!dh || dh->dtype != DType::F32 || dh->shape != ctx.input(1)->shape)
    return gpuKernelError(op, "dh must have h's type " + shapeToString(ctx.input(1)->shape));
  if (!dw || dw->dtype != DType::F32 || dw->shape != ctx.input(2)->shape)
    return gpuKernelError(op, "dW must have W's type " + shapeToString(ctx.input(2)->shape));
  const size_t need = gradWorkspace(ctx);
  if (!ctx.workspace || ctx.workspaceBytes < need)
    return gpuKernelError(op, "workspace is smaller than the gradient needs");
  WorkspaceCarver ws(ctx.workspace);
  Scratch s;
  s.logits = ws.take<float>(d->chunk * d->vocab);
  long long *count = ws.take<long long>(1);
  carveBf16(*d, true, ws, s);
  if (d->rows == 0 || d->vocab == 0 || d->hidden == 0) { // nothing flows: zero gradients
    if (dh->nbytes()) MEGAC_CUDA_TRY(cudaMemsetAsync(dh->data, 0, dh->nbytes(), ctx.gpu.stream));
    if (dw->nbytes()) MEGAC_CUDA_TRY(cudaMemsetAsync(dw->data, 0, dw->nbytes(), ctx.gpu.stream));
    return llvm::Error::success();
  }
  if (auto e = packW(ctx.gpu, *d, s, ctx.input(2)->as<const float>())) return e;
  return ctx.input(3)->dtype == DType::I32 ? gradChunks<int32_t>(ctx, *d, s, count)
                                           : gradChunks<int64_t>(ctx, *d, s, count);
}

} // namespace

void registerLinearCrossEntropyGpuKernels() {
  registerGpuKernel("megac.LinearCrossEntropy", forward, forwardWorkspace);
  registerGpuKernel("megac.LinearCrossEntropyGrad", grad, gradWorkspace);
}

} // namespace megac::cuda
