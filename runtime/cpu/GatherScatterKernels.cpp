// Index-driven data movement: Gather, GatherElements, GatherND, ScatterND,
// ScatterElements (and the deprecated Scatter), OneHot. Every index is
// checked before anything is written: bad indices are errors, not crashes.
#include "runtime/cpu/ShapeKernelsInternal.h"
#include "runtime/cpu/ShapeSemantics.h"

#include <algorithm>
#include <cstring>

namespace megac::cpu {

namespace {

llvm::Error requireIntegerIndices(llvm::StringRef op, const Tensor &indices) {
  if (!isIntegerType(indices.dtype()))
    return kernelError(op, "indices must be an integer tensor, got " + llvm::Twine(dtypeName(indices.dtype())));
  return llvm::Error::success();
}

// One memcpy per gathered row: Gather on an embedding table is hot in training.
llvm::Error gatherKernel(KernelContext &ctx) {
  if (auto e = requireInputs("Gather", ctx, 2)) return e;
  const Tensor &data = *ctx.input(0), &indices = *ctx.input(1);
  Tensor &out = ctx.output(0);
  if (auto e = requireIntegerIndices("Gather", indices)) return e;
  auto axis = normalizeAxisIn(ctx.attrs.getInt("axis", 0), data.rank());
  if (!axis) return kernelError("Gather", llvm::toString(axis.takeError()));
  std::vector<int64_t> idx = indices.toInt64Vector();
  int64_t n = data.dim(*axis);
  if (auto e = normalizeIndices("Gather", idx, n, "")) return e;
  size_t es = dtypeSize(data.dtype());
  int64_t outer = dimsProduct(data.shape(), 0, *axis);
  int64_t rowBytes = dimsProduct(data.shape(), *axis + 1, data.rank()) * int64_t(es);
  int64_t nIdx = int64_t(idx.size());
  if (out.dtype() != data.dtype() || int64_t(out.nbytes()) != outer * nIdx * rowBytes)
    return kernelError("Gather", "output shape does not match data and indices");
  const uint8_t *src = static_cast<const uint8_t *>(data.raw());
  uint8_t *dst = static_cast<uint8_t *>(out.raw());
  parallelFor(outer * nIdx, rowBytes, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t o = r / nIdx, j = r % nIdx;
      std::memcpy(dst + r * rowBytes, src + (o * n + idx[size_t(j)]) * rowBytes, size_t(rowBytes));
    }
  });
  return llvm::Error::success();
}

llvm::Error gatherElementsKernel(KernelContext &ctx) {
  if (auto e = requireInputs("GatherElements", ctx, 2)) return e;
  const Tensor &data = *ctx.input(0), &indices = *ctx.input(1);
  Tensor &out = ctx.output(0);
  if (auto e = requireIntegerIndices("GatherElements", indices)) return e;
  int64_t rank = data.rank();
  auto axis = normalizeAxisIn(ctx.attrs.getInt("axis", 0), rank);
  if (!axis) return kernelError("GatherElements", llvm::toString(axis.takeError()));
  if (indices.rank() != rank || out.shape() != indices.shape() || out.dtype() != data.dtype())
    return kernelError("GatherElements", "indices must have the data's rank and the output's shape");
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis && indices.dim(d) > data.dim(d))
      return kernelError("GatherElements", "indices dim " + llvm::Twine(d) + " exceeds the data's");
  std::vector<int64_t> idx = indices.toInt64Vector();
  if (auto e = normalizeIndices("GatherElements", idx, data.dim(*axis), "")) return e;
  std::vector<int64_t> strides = rowMajorStrides(data.shape());
  size_t es = dtypeSize(data.dtype());
  const uint8_t *src = static_cast<const uint8_t *>(data.raw());
  uint8_t *dst = static_cast<uint8_t *>(out.raw());
  std::vector<int64_t> coord(size_t(rank), 0);
  for (int64_t i = 0; i < int64_t(idx.size()); ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < rank; ++d) off += (d == *axis ? idx[size_t(i)] : coord[size_t(d)]) * strides[size_t(d)];
    copyElement(dst + i * int64_t(es), src + off * int64_t(es), es);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++coord[size_t(d)] < indices.dim(d)) break;
      coord[size_t(d)] = 0;
    }
  }
  return llvm::Error::success();
}

// Offsets (in elements) of the slices that index tuples of length k address
// within a block of `blockShape` (the data's dims after the batch dims).
llvm::Expected<std::vector<int64_t>> tupleOffsets(llvm::StringRef op, const std::vector<int64_t> &tuples, int64_t k,
                                                  const Shape &blockShape) {
  std::vector<int64_t> strides = rowMajorStrides(blockShape), offs;
  if (k <= 0) return offs;
  offs.reserve(tuples.size() / size_t(std::max<int64_t>(k, 1)));
  for (size_t t = 0; t + size_t(k) <= tuples.size(); t += size_t(k)) {
    int64_t off = 0;
    for (int64_t m = 0; m < k; ++m) {
      int64_t i = tuples[t + size_t(m)], dim = blockShape[size_t(m)];
      if (i < -dim || i >= dim)
        return kernelError(op, "index " + llvm::Twine(i) + " is out of range [" + llvm::Twine(-dim) + ", " +
                                   llvm::Twine(dim - 1) + "] for data dim " + llvm::Twine(m));
      off += (i < 0 ? i + dim : i) * strides[size_t(m)];
    }
    offs.push_back(off);
  }
  return offs;
}

llvm::Error gatherNDKernel(KernelContext &ctx) {
  if (auto e = requireInputs("GatherND", ctx, 2)) return e;
  const Tensor &data = *ctx.input(0), &indices = *ctx.input(1);
  Tensor &out = ctx.output(0);
  if (auto e = requireIntegerIndices("GatherND", indices)) return e;
  int64_t r = data.rank(), q = indices.rank(), b = ctx.attrs.getInt("batch_dims", 0);
  if (q < 1 || b < 0 || b >= std::min(r, q)) return kernelError("GatherND", "invalid batch_dims or ranks");
  int64_t k = indices.dim(-1);
  if (k < 1 || k > r - b) return kernelError("GatherND", "indices' last dim must be in [1, data rank - batch_dims]");
  for (int64_t d = 0; d < b; ++d)
    if (indices.dim(d) != data.dim(d)) return kernelError("GatherND", "batch dims of data and indices differ");
  Shape block(data.shape().begin() + b, data.shape().end());
  auto offs = tupleOffsets("GatherND", indices.toInt64Vector(), k, block);
  if (!offs) return offs.takeError();
  int64_t batches = dimsProduct(data.shape(), 0, b), perBatch = int64_t(offs->size()) / std::max<int64_t>(batches, 1);
  size_t es = dtypeSize(data.dtype());
  int64_t sliceBytes = dimsProduct(data.shape(), b + k, r) * int64_t(es);
  int64_t blockElems = dimsProduct(block, 0, int64_t(block.size()));
  if (out.dtype() != data.dtype() || int64_t(out.nbytes()) != int64_t(offs->size()) * sliceBytes)
    return kernelError("GatherND", "output shape does not match data and indices");
  const uint8_t *src = static_cast<const uint8_t *>(data.raw());
  uint8_t *dst = static_cast<uint8_t *>(out.raw());
  for (int64_t i = 0; i < int64_t(offs->size()); ++i) {
    int64_t batch = perBatch ? i / perBatch : 0;
    std::memcpy(dst + i * sliceBytes, src + (batch * blockElems + (*offs)[size_t(i)]) * int64_t(es),
                size_t(sliceBytes));
  }
  return llvm::Error::success();
}

enum class Reduction { None, Add, Mul, Max, Min };

llvm::Expected<Reduction> parseReduction(llvm::StringRef op, const Attrs &attrs) {
  std::string r = attrs.getString("reduction", "none");
  if (r == "none") return Reduction::None;
  if (r == "add") return Reduction::Add;
  if (r == "mul") return Reduction::Mul;
  if (r == "max") return Reduction::Max;
  if (r == "min") return Reduction::Min;
  return kernelError(op, "unknown reduction '" + r + "'");
}

// dst[i] = reduce(dst[i], src[i]) for n elements of dtype dt.
bool reduceInto(void *dst, const void *src, int64_t n, DType dt, Reduction red) {
  return dispatchArith(dt, [&](auto tag) {
    using A = decltype(tag);
    using S = typename A::Storage;
    using C = typename A::Compute;
    S *d = static_cast<S *>(dst);
    const S *s = static_cast<const S *>(src);
    for (int64_t i = 0; i < n; ++i) {
      C a = A::load(d[i]), b = A::load(s[i]);
      C r = red == Reduction::Add   ? C(a + b)
            : red == Reduction::Mul ? C(a * b)
            : red == Reduction::Max ? std::max(a, b)
                                    : std::min(a, b);
      d[i] = A::store(r);
    }
  });
}

llvm::Error scatterNDKernel(KernelContext &ctx) {
  if (auto e = requireInputs("ScatterND", ctx, 3)) return e;
  const Tensor &data = *ctx.input(0), &indices = *ctx.input(1), &updates = *ctx.input(2);
  Tensor &out = ctx.output(0);
  if (auto e = requireIntegerIndices("ScatterND", indices)) return e;
  auto red = parseReduction("ScatterND", ctx.attrs);
  if (!red) return red.takeError();
  int64_t r = data.rank(), q = indices.rank();
  if (q < 1) return kernelError("ScatterND", "indices must have rank >= 1");
  int64_t k = indices.dim(-1);
  if (k < 0 || k > r) return kernelError("ScatterND", "indices' last dim must be at most the data rank");
  Shape want(indices.shape().begin(), indices.shape().end() - 1);
  want.insert(want.end(), data.shape().begin() + k, data.shape().end());
  if (updates.shape() != want || updates.dtype() != data.dtype())
    return kernelError("ScatterND", "updates must have shape " + shapeToString(want));
  if (out.shape() != data.shape() || out.dtype() != data.dtype())
    return kernelError("ScatterND", "output must have the data's type");
  auto offs = tupleOffsets("ScatterND", indices.toInt64Vector(), k, data.shape());
  if (!offs) return offs.takeError();
  if (k == 0) offs->assign(size_t(dimsProduct(want, 0, q - 1)), 0);
  size_t es = dtypeSize(data.dtype());
  int64_t slice = dimsProduct(data.shape(), k, r);
  std::memcpy(out.raw(), data.raw(), data.nbytes());
  uint8_t *dst = static_cast<uint8_t *>(out.raw());
  const uint8_t *src = static_cast<const uint8_t *>(updates.raw());
  for (size_t i = 0; i < offs->size(); ++i) {
    uint8_t *to = dst + (*offs)[i] * int64_t(es);
    const uint8_t *from = src + int64_t(i) * slice * int64_t(es);
    if (*red == Reduction::None) std::memcpy(to, from, size_t(slice) * es);
    else if (!reduceInto(to, from, slice, data.dtype(), *red))
      return kernelError("ScatterND", "reduction is not defined for " + llvm::Twine(dtypeName(data.dtype())));
  }
  return llvm::Error::success();
}

llvm::Error scatterElementsImpl(llvm::StringRef op, KernelContext &ctx) {
  if (auto e = requireInputs(op, ctx, 3)) return e;
  const Tensor &data = *ctx.input(0), &indices = *ctx.input(1), &updates = *ctx.input(2);
  Tensor &out = ctx.output(0);
  if (auto e = requireIntegerIndices(op, indices)) return e;
  auto red = parseReduction(op, ctx.attrs);
  if (!red) return red.takeError();
  int64_t rank = data.rank();
  auto axis = normalizeAxisIn(ctx.attrs.getInt("axis", 0), rank);
  if (!axis) return kernelError(op, llvm::toString(axis.takeError()));
  if (indices.rank() != rank || updates.shape() != indices.shape() || updates.dtype() != data.dtype())
    return kernelError(op, "indices and updates must have one shape, of the data's rank");
  if (out.shape() != data.shape() || out.dtype() != data.dtype())
    return kernelError(op, "output must have the data's type");
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis && indices.dim(d) > data.dim(d))
      return kernelError(op, "indices dim " + llvm::Twine(d) + " exceeds the data's");
  std::vector<int64_t> idx = indices.toInt64Vector();
  if (auto e = normalizeIndices(op, idx, data.dim(*axis), "")) return e;
  std::memcpy(out.raw(), data.raw(), data.nbytes());
  std::vector<int64_t> strides = rowMajorStrides(data.shape());
  size_t es = dtypeSize(data.dtype());
  uint8_t *dst = static_cast<uint8_t *>(out.raw());
  const uint8_t *src = static_cast<const uint8_t *>(updates.raw());
  std::vector<int64_t> coord(size_t(rank), 0);
  for (int64_t i = 0; i < int64_t(idx.size()); ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < rank; ++d) off += (d == *axis ? idx[size_t(i)] : coord[size_t(d)]) * strides[size_t(d)];
    if (*red == Reduction::None) copyElement(dst + off * int64_t(es), src + i * int64_t(es), es);
    else if (!reduceInto(dst + off * int64_t(es), src + i * int64_t(es), 1, data.dtype(), *red))
      return kernelError(op, "reduction is not defined for " + llvm::Twine(dtypeName(data.dtype())));
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++coord[size_t(d)] < indices.dim(d)) break;
      coord[size_t(d)] = 0;
    }
  }
  return llvm::Error::success();
}

llvm::Error scatterElementsKernel(KernelContext &ctx) { return scatterElementsImpl("ScatterElements", ctx); }
llvm::Error scatterKernel(KernelContext &ctx) { return scatterElementsImpl("Scatter", ctx); }

llvm::Error oneHotKernel(KernelContext &ctx) {
  if (auto e = requireInputs("OneHot", ctx, 3)) return e;
  const Tensor &indices = *ctx.input(0), &depthT = *ctx.input(1), &values = *ctx.input(2);
  Tensor &out = ctx.output(0);
  if (depthT.numel() != 1 || values.numel() != 2 || values.dtype() != out.dtype())
    return kernelError("OneHot", "depth must be a scalar and values hold [off, on] of the output dtype");
  int64_t depth = int64_t(depthT.getAsDouble(0));
  int64_t r = indices.rank();
  auto axis = normalizeAxisIn(ctx.attrs.getInt("axis", -1), r + 1);
  if (!axis) return kernelError("OneHot", llvm::toString(axis.takeError()));
  int64_t outer = dimsProduct(indices.shape(), 0, *axis), inner = dimsProduct(indices.shape(), *axis, r);
  if (out.numel() != outer * depth * inner) return kernelError("OneHot", "output shape does not match depth");
  size_t es = dtypeSize(out.dtype());
  const uint8_t *off = static_cast<const uint8_t *>(values.raw()), *on = off + es;
  uint8_t *dst = static_cast<uint8_t *>(out.raw());
  for (int64_t i = 0; i < out.numel(); ++i) copyElement(dst + i * int64_t(es), off, es);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      // Out-of-range indices give all-off rows (the spec's rule, not an error).
      int64_t v = int64_t(indices.getAsDouble(o * inner + i));
      if (v < 0) v += depth;
      if (v < 0 || v >= depth) continue;
      copyElement(dst + ((o * depth + v) * inner + i) * int64_t(es), on, es);
    }
  return llvm::Error::success();
}

} // namespace

void registerGatherScatterKernels() {
  registerKernel("Gather", gatherKernel);
  registerKernel("GatherElements", gatherElementsKernel);
  registerKernel("GatherND", gatherNDKernel);
  registerKernel("ScatterND", scatterNDKernel);
  registerKernel("ScatterElements", scatterElementsKernel);
  registerKernel("Scatter", scatterKernel);
  registerKernel("OneHot", oneHotKernel);
}

} // namespace megac::cpu
