// RotaryEmbedding (opset 23) with the CPU kernel's semantics
// (runtime/cpu/RotaryKernels.cpp): the first rotary_embedding_dim elements of
// each head are rotated as halves (x[k], x[k + d/2]) or interleaved pairs
// (x[2k], x[2k + 1]); the rest pass through. X is [batch, heads, seq, head]
// or [batch, seq, heads * head] (num_heads); the caches are per token
// ([batch or 1, seq or 1, d/2]) or gathered by position_ids ([batch or 1,
// seq or 1] int64/int32 into [max_positions, d/2] caches).
//
// A thread per rotated pair or pass-through element (four pairs where the
// whole head rotates as halves and everything is float4-aligned). The CPU
// rejects out-of-range position ids; a kernel cannot fail, so here a token
// whose position id is out of range gets zeros in its rotated part (its
// pass-through part is still copied).
#include "runtime/cpu/NormAttentionShapes.h"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuKernel.h"

namespace megac::cuda {

namespace {

struct RotaryParams {
  bool is3D, interleaved;
  int64_t batch, heads, seq, headSize, rotaryDim;
  int64_t tableBatch, tableSeq, maxPositions;
};

// A thread per work item of a head: items k < half rotate the pair
// (x[k], x[k + half]) or (x[2k], x[2k + 1]); the rest copy one pass-through
// element. Idx is int32 where every index fits (cheaper division).
template <class Id, class Idx>
__global__ void rotaryKernel(const float *__restrict__ x, const float *__restrict__ cosCache,
                             const float *__restrict__ sinCache, const Id *__restrict__ positionIds,
                             float *__restrict__ y, Idx total, RotaryParams p) {
  const Idx half = Idx(p.rotaryDim / 2), headSize = Idx(p.headSize), heads = Idx(p.heads), seq = Idx(p.seq);
  const Idx items = half + headSize - Idx(p.rotaryDim);
  for (Idx w = Idx(blockIdx.x) * Idx(blockDim.x) + Idx(threadIdx.x); w < total; w += Idx(gridDim.x) * Idx(blockDim.x)) {
    const Idx j = w % items, head = w / items, base = head * headSize;
    if (j >= half) {
      const Idx e = base + Idx(p.rotaryDim) + (j - half);
      y[e] = x[e];
      continue;
    }
    // head enumerates (b, s, h) for 3-D input, (b, h, s) for 4-D.
    const Idx s = p.is3D ? (head / heads) % seq : head % seq, b = head / (heads * seq);
    int64_t row = int64_t(p.tableBatch == 1 ? 0 : b) * p.tableSeq + (p.tableSeq == 1 ? 0 : s);
    const Idx i1 = p.interleaved ? base + 2 * j : base + j, i2 = p.interleaved ? i1 + 1 : i1 + half;
    if (positionIds) {
      row = int64_t(positionIds[row]);
      if (row < 0 || row >= p.maxPositions) {
        y[i1] = 0.f;
        y[i2] = 0.f;
        continue;
      }
    }
    const float c = cosCache[row * half + j], sn = sinCache[row * half + j], x1 = x[i1], x2 = x[i2];
    y[i1] = c * x1 - sn * x2;
    y[i2] = sn * x1 + c * x2;
  }
}

// The common case, four pairs a thread: halves (not interleaved), the whole
// head rotated, half a multiple of 4 and every pointer 16-byte aligned, so
// each thread moves float4s. Same arithmetic as rotaryKernel per element.
template <class Id, class Idx>
__global__ void rotaryHalvesX4Kernel(const float4 *__restrict__ x, const float4 *__restrict__ cosCache,
                                     const float4 *__restrict__ sinCache, const Id *__restrict__ positionIds,
                                     float4 *__restrict__ y, Idx total, RotaryParams p) {
  const Idx quarter = Idx(p.rotaryDim / 8), heads = Idx(p.heads), seq = Idx(p.seq);
  for (Idx w = Idx(blockIdx.x) * Idx(blockDim.x) + Idx(threadIdx.x); w < total; w += Idx(gridDim.x) * Idx(blockDim.x)) {
    const Idx j = w % quarter, head = w / quarter, i1 = head * 2 * quarter + j, i2 = i1 + quarter;
    const Idx s = p.is3D ? (head / heads) % seq : head % seq, b = head / (heads * seq);
    int64_t row = int64_t(p.tableBatch == 1 ? 0 : b) * p.tableSeq + (p.tableSeq == 1 ? 0 : s);
    if (positionIds) {
      row = int64_t(positionIds[row]);
      if (row < 0 || row >= p.maxPositions) {
        y[i1] = y[i2] = make_float4(0.f, 0.f, 0.f, 0.f);
        continue;
      }
    }
    const float4 c = cosCache[row * quarter + j], sn = sinCache[row * quarter + j], a = x[i1], d = x[i2];
    y[i1] = make_float4(c.x * a.x - sn.x * d.x, c.y * a.y - sn.y * d.y, c.z * a.z - sn.z * d.z, c.w * a.w - sn.w * d.w);
    y[i2] = make_float4(sn.x * a.x + c.x * d.x, sn.y * a.y + c.y * d.y, sn.z * a.z + c.z * d.z, sn.w * a.w + c.w * d.w);
  }
}

llvm::Error rotaryEmbedding(GpuKernelContext &ctx) {
  const char *op = "RotaryEmbedding";
  const DeviceTensor *x = ctx.input(0), *cos = ctx.input(1), *sin = ctx.input(2), *ids = ctx.input(3);
  const DeviceTensor *y = ctx.output(0);
  if (!x || !cos || !sin) return gpuKernelError(op, "X, cos_cache and sin_cache are required");
  auto d = cpu::rotaryDims(ctx.attrs, x->shape, cos->shape, sin->shape, ids ? &ids->shape : nullptr);
  if (!d) return gpuKernelError(op, llvm::toString(d.takeError()));
  if (!y || y->shape != x->shape) return gpuKernelError(op, "output must have X's shape " + shapeToString(x->shape));
  for (const DeviceTensor *t : {x, cos, sin, y})
    if (t->dtype != DType::F32)
      return gpuKernelError(op, llvm::Twine("unsupported element type ") + dtypeName(t->dtype) + " on the GPU");
  if (ids && ids->dtype != DType::I64 && ids->dtype != DType::I32)
    return gpuKernelError(op, llvm::Twine("position_ids of type ") + dtypeName(ids->dtype) +
                                  " are not supported on the GPU (int64 or int32)");
  const int64_t n = x->numel(), heads = d->batch * d->seq * d->heads;
  const int64_t total = heads * (d->rotaryDim / 2 + d->headSize - d->rotaryDim);
  if (total == 0) return llvm::Error::success();
  const RotaryParams p{d->is3D,     d->interleaved, d->batch,      d->heads,    d->seq,
                       d->headSize, d->rotaryDim,   d->tableBatch, d->tableSeq, d->maxPositions};
  cudaStream_t stream = ctx.gpu.stream;
  const float *xp = x->as<float>(), *cp = cos->as<float>(), *sp = sin->as<float>();
  float *yp = y->as<float>();
  // int32 indices where they (and the grid-stride steps past them) cannot overflow.
  const bool small = n < (int64_t(1) << 30) && cos->numel() < (int64_t(1) << 30);
  const bool x4 = !d->interleaved && d->rotaryDim == d->headSize && d->rotaryDim % 8 == 0 && aligned16(xp) &&
                  aligned16(cp) && aligned16(sp) && aligned16(yp);
  auto launch = [&](auto id, auto idx) {
    using Id = decltype(id);
    using Idx = decltype(idx);
    const Id *pid = ids ? ids->as<Id>() : nullptr;
    if (x4)
      rotaryHalvesX4Kernel<Id, Idx><<<gridFor(total / 4), 256, 0, stream>>>(
          reinterpret_cast<const float4 *>(xp), reinterpret_cast<const float4 *>(cp),
          reinterpret_cast<const float4 *>(sp), pid, reinterpret_cast<float4 *>(yp), Idx(total / 4), p);
    else rotaryKernel<Id, Idx><<<gridFor(total), 256, 0, stream>>>(xp, cp, sp, pid, yp, Idx(total), p);
  };
  if (ids && ids->dtype == DType::I32) {
    if (small) launch(int32_t(), int32_t());
    else launch(int32_t(), int64_t());
  } else {
    if (small) launch(int64_t(), int32_t());
    else launch(int64_t(), int64_t());
  }
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

} // namespace

void registerRotaryGpuKernels() { registerGpuKernel("RotaryEmbedding", rotaryEmbedding); }

} // namespace megac::cuda
