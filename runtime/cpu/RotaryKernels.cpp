// RotaryEmbedding (opset 23): rotates the first rotary_embedding_dim
// elements of each head, as halves (x[k], x[k + d/2]) or interleaved pairs
// (x[2k], x[2k + 1]), by the angle whose cos/sin the caches hold; the rest
// of the head passes through. Caches are gathered by position_ids, or are
// already per token ([batch or 1, seq or 1, d/2]: batch 1 broadcasts, as the
// torch exporter emits them).
#include "runtime/cpu/FloatRows.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/NormAttentionShapes.h"

namespace megac::cpu {

namespace {

template <class C> void rotateHead(const C *x, const C *cos, const C *sin, const RotaryDims &d, C *y) {
  const int64_t half = d.rotaryDim / 2;
  if (d.interleaved) {
    for (int64_t k = 0; k < half; ++k) {
      C x1 = x[2 * k], x2 = x[2 * k + 1];
      y[2 * k] = cos[k] * x1 - sin[k] * x2;
      y[2 * k + 1] = sin[k] * x1 + cos[k] * x2;
    }
  } else {
    for (int64_t k = 0; k < half; ++k) {
      C x1 = x[k], x2 = x[k + half];
      y[k] = cos[k] * x1 - sin[k] * x2;
      y[k + half] = sin[k] * x1 + cos[k] * x2;
    }
  }
  for (int64_t k = d.rotaryDim; k < d.headSize; ++k) y[k] = x[k];
}

// Row of the caches for token (b, s): an error for an out-of-range position.
llvm::Expected<int64_t> cacheRow(const RotaryDims &d, const Tensor *positionIds, int64_t b, int64_t s) {
  int64_t tb = d.tableBatch == 1 ? 0 : b, ts = d.tableSeq == 1 ? 0 : s;
  int64_t idx = tb * d.tableSeq + ts;
  if (!positionIds) return idx;
  int64_t p = positionIds->getAsInt(idx);
  if (p < 0 || p >= d.maxPositions)
    return kernelError("RotaryEmbedding",
                       "position id " + llvm::Twine(p) + " is out of range [0, " + llvm::Twine(d.maxPositions) + ")");
  return p;
}

template <class C> llvm::Error rotary(KernelContext &ctx, const RotaryDims &d) {
  const Tensor &x = *ctx.input(0);
  const Tensor *positionIds = ctx.input(3);
  Tensor &y = ctx.output(0);
  const std::vector<C> cos = readAll<C>(*ctx.input(1)), sin = readAll<C>(*ctx.input(2));
  const int64_t half = d.rotaryDim / 2, hs = d.headSize;
  // Resolve every token's cache row first so that bad ids fail cleanly.
  std::vector<int64_t> rows(size_t(d.batch * d.seq));
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t s = 0; s < d.seq; ++s) {
      auto r = cacheRow(d, positionIds, b, s);
      if (!r) return r.takeError();
      rows[size_t(b * d.seq + s)] = *r;
    }
  const int64_t heads = d.batch * d.seq * d.heads;
  parallelFor(heads, hs * 4, [&](int64_t begin, int64_t end) {
    std::vector<C> in(static_cast<size_t>(hs)), out(static_cast<size_t>(hs));
    for (int64_t i = begin; i < end; ++i) {
      // i enumerates (b, s, h); the head's offset depends on the layout.
      int64_t h = i % d.heads, s = (i / d.heads) % d.seq, b = i / (d.heads * d.seq);
      int64_t offset = d.is3D ? i * hs : ((b * d.heads + h) * d.seq + s) * hs;
      const int64_t row = rows[size_t(b * d.seq + s)];
      readElements(x, offset, hs, in.data());
      rotateHead(in.data(), cos.data() + row * half, sin.data() + row * half, d, out.data());
      writeElements(y, offset, hs, out.data());
    }
  });
  return llvm::Error::success();
}

llvm::Error rotaryEmbedding(KernelContext &ctx) {
  const Tensor *x = ctx.input(0), *cos = ctx.input(1), *sin = ctx.input(2), *ids = ctx.input(3);
  if (!x || !cos || !sin) return kernelError("RotaryEmbedding", "X, cos_cache and sin_cache are required");
  auto d = rotaryDims(ctx.attrs, x->shape(), cos->shape(), sin->shape(), ids ? &ids->shape() : nullptr);
  if (!d) return kernelError("RotaryEmbedding", llvm::toString(d.takeError()));
  if (ctx.outputs.empty() || !ctx.outputs[0] || ctx.output(0).shape() != x->shape())
    return kernelError("RotaryEmbedding", "output must have X's shape " + shapeToString(x->shape()));
  if (x->dtype() == DType::F64) return rotary<double>(ctx, *d);
  return rotary<float>(ctx, *d);
}

} // namespace

void registerRotaryKernels() { registerKernel("RotaryEmbedding", rotaryEmbedding); }

} // namespace megac::cpu
