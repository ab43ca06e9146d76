// Data-movement kernels: reshapes, Transpose, Concat, Split, Slice, Expand,
// Tile, Pad. They move bytes, so one kernel serves every dtype. Gathers and
// scatters live in GatherScatterKernels.cpp, generators (Range,
// ConstantOfShape, CumSum, Trilu) in GeneratorKernels.cpp.
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/ShapeKernelsInternal.h"
#include "runtime/cpu/ShapeSemantics.h"

#include <algorithm>
#include <cstring>

namespace megac::cpu {

namespace {

template <class T> void copyRowTyped(uint8_t *dst, const uint8_t *src, int64_t n, int64_t stride) {
  T *d = reinterpret_cast<T *>(dst);
  const T *s = reinterpret_cast<const T *>(src);
  if (stride == 0) std::fill(d, d + n, *s);
  else
    for (int64_t i = 0; i < n; ++i) d[i] = s[i * stride];
}

// n elements of src, `stride` elements apart, into dense dst.
void copyRow(uint8_t *dst, const uint8_t *src, int64_t n, int64_t stride, size_t es) {
  if (stride == 1) {
    std::memcpy(dst, src, size_t(n) * es);
    return;
  }
  switch (es) {
  case 1: copyRowTyped<uint8_t>(dst, src, n, stride); return;
  case 2: copyRowTyped<uint16_t>(dst, src, n, stride); return;
  case 4: copyRowTyped<uint32_t>(dst, src, n, stride); return;
  case 8: copyRowTyped<uint64_t>(dst, src, n, stride); return;
  default:
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * int64_t(es), src + i * stride * int64_t(es), es);
  }
}

llvm::Error checkSameBytes(llvm::StringRef op, const Tensor &in, const Tensor &out) {
  if (in.numel() != out.numel() || in.dtype() != out.dtype())
    return kernelError(op, "input " + llvm::Twine(dtypeName(in.dtype())) + shapeToString(in.shape()) +
                               " cannot become output " + dtypeName(out.dtype()) + shapeToString(out.shape()));
  return llvm::Error::success();
}

// Reshape, Squeeze, Unsqueeze, Flatten, Identity-like ops: the bytes are unchanged.
template <const char *Name> llvm::Error copyKernel(KernelContext &ctx) {
  if (auto e = requireInputs(Name, ctx, 1)) return e;
  const Tensor *in = ctx.input(0);
  if (auto e = checkSameBytes(Name, *in, ctx.output(0))) return e;
  std::memcpy(ctx.output(0).raw(), in->raw(), in->nbytes());
  return llvm::Error::success();
}
constexpr char kReshape[] = "Reshape", kSqueeze[] = "Squeeze", kUnsqueeze[] = "Unsqueeze", kFlatten[] = "Flatten";

llvm::Error transposeKernel(KernelContext &ctx) {
  if (auto e = requireInputs("Transpose", ctx, 1)) return e;
  const Tensor &in = *ctx.input(0);
  Tensor &out = ctx.output(0);
  int64_t rank = in.rank();
  std::vector<int64_t> perm = ctx.attrs.getInts("perm");
  if (perm.empty())
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  if (int64_t(perm.size()) != rank || out.rank() != rank || out.dtype() != in.dtype())
    return kernelError("Transpose", "perm does not match the input and output ranks");
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape()), srcStrides(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    int64_t p = perm[size_t(d)];
    if (p < 0 || p >= rank || out.dim(d) != in.dim(p)) return kernelError("Transpose", "invalid perm");
    srcStrides[size_t(d)] = inStrides[size_t(p)];
  }
  copyStrided(out.raw(), in.raw(), out.shape(), srcStrides, dtypeSize(in.dtype()));
  return llvm::Error::success();
}

llvm::Error concatKernel(KernelContext &ctx) {
  if (auto e = requireInputs("Concat", ctx, 1)) return e;
  Tensor &out = ctx.output(0);
  int64_t rank = out.rank();
  auto axis = normalizeAxisIn(ctx.attrs.getInt("axis", 0), rank);
  if (!axis) return kernelError("Concat", llvm::toString(axis.takeError()));
  size_t es = dtypeSize(out.dtype());
  int64_t outer = dimsProduct(out.shape(), 0, *axis), inner = dimsProduct(out.shape(), *axis + 1, rank);
  std::vector<int64_t> blockBytes;
  int64_t total = 0;
  for (const Tensor *in : ctx.inputs) {
    if (!in || in->rank() != rank || in->dtype() != out.dtype())
      return kernelError("Concat", "inputs must all have the output's rank and dtype");
    blockBytes.push_back(in->dim(*axis) * inner * int64_t(es));
    total += in->dim(*axis);
  }
  if (total != out.dim(*axis)) return kernelError("Concat", "input sizes along the axis do not add up to the output");
  int64_t rowBytes = out.dim(*axis) * inner * int64_t(es);
  uint8_t *dst = static_cast<uint8_t *>(out.raw());
  parallelFor(outer, rowBytes, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      uint8_t *row = dst + o * rowBytes;
      for (size_t k = 0; k < ctx.inputs.size(); ++k) {
        std::memcpy(row, static_cast<const uint8_t *>(ctx.inputs[k]->raw()) + o * blockBytes[k], size_t(blockBytes[k]));
        row += blockBytes[k];
      }
    }
  });
  return llvm::Error::success();
}

// The chunk sizes come from the outputs' shapes, which inference computed
// from `split` / `num_outputs`.
llvm::Error splitKernel(KernelContext &ctx) {
  if (auto e = requireInputs("Split", ctx, 1)) return e;
  const Tensor &in = *ctx.input(0);
  int64_t rank = in.rank();
  auto axis = normalizeAxisIn(ctx.attrs.getInt("axis", 0), rank);
  if (!axis) return kernelError("Split", llvm::toString(axis.takeError()));
  size_t es = dtypeSize(in.dtype());
  int64_t outer = dimsProduct(in.shape(), 0, *axis), inner = dimsProduct(in.shape(), *axis + 1, rank);
  int64_t total = 0;
  for (Tensor *o : ctx.outputs) {
    if (o->rank() != rank || o->dtype() != in.dtype()) return kernelError("Split", "output rank or dtype mismatch");
    total += o->dim(*axis);
  }
  if (total != in.dim(*axis)) return kernelError("Split", "output sizes along the axis do not add up to the input");
  int64_t rowBytes = in.dim(*axis) * inner * int64_t(es);
  const uint8_t *src = static_cast<const uint8_t *>(in.raw());
  parallelFor(outer, rowBytes, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const uint8_t *row = src + o * rowBytes;
      for (Tensor *out : ctx.outputs) {
        int64_t bytes = out->dim(*axis) * inner * int64_t(es);
        std::memcpy(static_cast<uint8_t *>(out->raw()) + o * bytes, row, size_t(bytes));
        row += bytes;
      }
    }
  });
  return llvm::Error::success();
}

llvm::Error sliceKernel(KernelContext &ctx) {
  if (auto e = requireInputs("Slice", ctx, 3)) return e;
  const Tensor &in = *ctx.input(0);
  Tensor &out = ctx.output(0);
  auto dims = resolveSlice(in.shape(), ctx.input(1)->toInt64Vector(), ctx.input(2)->toInt64Vector(),
                           intsOrDefault(ctx.input(3)), intsOrDefault(ctx.input(4)));
  if (!dims) return kernelError("Slice", llvm::toString(dims.takeError()));
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape()), srcStrides(dims->size());
  int64_t offset = 0;
  for (size_t d = 0; d < dims->size(); ++d) {
    const SliceDim &sd = (*dims)[d];
    if (out.dim(int64_t(d)) != sd.count) return kernelError("Slice", "output shape does not match the slice");
    offset += sd.start * inStrides[d];
    srcStrides[d] = sd.step * inStrides[d];
  }
  if (out.numel() == 0) return llvm::Error::success();
  size_t es = dtypeSize(in.dtype());
  copyStrided(out.raw(), static_cast<const uint8_t *>(in.raw()) + offset * int64_t(es), out.shape(), srcStrides, es);
  return llvm::Error::success();
}

llvm::Error expandKernel(KernelContext &ctx) {
  if (auto e = requireInputs("Expand", ctx, 1)) return e;
  const Tensor &in = *ctx.input(0);
  Tensor &out = ctx.output(0);
  if (in.rank() > out.rank() || in.dtype() != out.dtype())
    return kernelError("Expand", "input " + shapeToString(in.shape()) + " does not broadcast to " +
                                     shapeToString(out.shape()));
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape()), srcStrides(size_t(out.rank()), 0);
  int64_t lead = out.rank() - in.rank();
  for (int64_t d = 0; d < in.rank(); ++d) {
    int64_t id = in.dim(d), od = out.dim(d + lead);
    if (id != od && id != 1)
      return kernelError("Expand", "input " + shapeToString(in.shape()) + " does not broadcast to " +
                                       shapeToString(out.shape()));
    srcStrides[size_t(d + lead)] = id == 1 ? 0 : inStrides[size_t(d)];
  }
  copyStrided(out.raw(), in.raw(), out.shape(), srcStrides, dtypeSize(in.dtype()));
  return llvm::Error::success();
}

// The output, viewed as [r0, d0, r1, d1, ...], reads the input with stride 0
// over each repeat.
llvm::Error tileKernel(KernelContext &ctx) {
  if (auto e = requireInputs("Tile", ctx, 1)) return e;
  const Tensor &in = *ctx.input(0);
  Tensor &out = ctx.output(0);
  if (out.rank() != in.rank() || out.dtype() != in.dtype()) return kernelError("Tile", "output rank mismatch");
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape());
  Shape view;
  std::vector<int64_t> strides;
  for (int64_t d = 0; d < in.rank(); ++d) {
    int64_t id = in.dim(d), od = out.dim(d);
    if (id == 0 ? od != 0 : od % id != 0) return kernelError("Tile", "output is not a whole number of repeats");
    view.push_back(id == 0 ? 0 : od / id);
    strides.push_back(0);
    view.push_back(id);
    strides.push_back(inStrides[size_t(d)]);
  }
  if (out.numel() == 0) return llvm::Error::success();
  copyStrided(out.raw(), in.raw(), view, strides, dtypeSize(in.dtype()));
  return llvm::Error::success();
}

// Source coordinate of output coordinate o along a padded axis; -1: the constant.
int64_t padSource(int64_t o, int64_t before, int64_t dim, const std::string &mode) {
  int64_t c = o - before;
  if (c >= 0 && c < dim) return c;
  if (mode == "constant" || dim == 0) return -1;
  if (mode == "edge") return c < 0 ? 0 : dim - 1;
  if (mode == "wrap") return ((c % dim) + dim) % dim;
  // reflect (mirror without repeating the edge), repeated as often as needed.
  if (dim == 1) return 0;
  int64_t period = 2 * (dim - 1);
  c = ((c % period) + period) % period;
  return c < dim ? c : period - c;
}

llvm::Error padKernel(KernelContext &ctx) {
  if (auto e = requireInputs("Pad", ctx, 2)) return e;
  const Tensor &in = *ctx.input(0);
  Tensor &out = ctx.output(0);
  std::string mode = ctx.attrs.getString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    return kernelError("Pad", "unknown mode '" + mode + "'");
  int64_t rank = in.rank();
  auto pads = resolvePads(rank, ctx.input(1)->toInt64Vector(), intsOrDefault(ctx.input(3)));
  if (!pads) return kernelError("Pad", llvm::toString(pads.takeError()));
  if (out.rank() != rank || out.dtype() != in.dtype()) return kernelError("Pad", "output rank or dtype mismatch");
  for (int64_t d = 0; d < rank; ++d)
    if (out.dim(d) != in.dim(d) + (*pads)[size_t(d)] + (*pads)[size_t(d + rank)])
      return kernelError("Pad", "output shape does not match the pads");
  if (mode != "constant" && in.numel() == 0 && out.numel() != 0)
    return kernelError("Pad", "cannot " + mode + "-pad an empty tensor");
  if (out.numel() == 0) return llvm::Error::success();

  size_t es = dtypeSize(in.dtype());
  Tensor fill(out.dtype(), {});
  if (const Tensor *v = ctx.input(2); v && v->numel() > 0) fill.setFromDouble(0, v->getAsDouble(0));

  if (rank == 0) {
    std::memcpy(out.raw(), in.raw(), es);
    return llvm::Error::success();
  }
  // Per axis: output coordinate -> input coordinate (or -1).
  std::vector<std::vector<int64_t>> maps(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d)
    for (int64_t o = 0; o < out.dim(d); ++o)
      maps[size_t(d)].push_back(padSource(o, (*pads)[size_t(d)], in.dim(d), mode));
  std::vector<int64_t> inStrides = rowMajorStrides(in.shape());
  int64_t inner = out.dim(rank - 1), rows = out.numel() / inner;
  const std::vector<int64_t> &innerMap = maps.back();
  const uint8_t *src = static_cast<const uint8_t *>(in.raw());
  uint8_t *dst = static_cast<uint8_t *>(out.raw());
  parallelFor(rows, inner * int64_t(es), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t rem = row, srcOff = 0;
      bool constantRow = false;
      for (int64_t d = rank - 2; d >= 0; --d) {
        int64_t o = rem % out.dim(d);
        rem /= out.dim(d);
        int64_t s = maps[size_t(d)][size_t(o)];
        if (s < 0) constantRow = true;
        else srcOff += s * inStrides[size_t(d)];
      }
      uint8_t *orow = dst + row * inner * int64_t(es);
      for (int64_t j = 0; j < inner; ++j) {
        int64_t s = constantRow ? -1 : innerMap[size_t(j)];
        const uint8_t *from = s < 0 ? static_cast<const uint8_t *>(fill.raw()) : src + (srcOff + s) * int64_t(es);
        std::memcpy(orow + j * int64_t(es), from, es);
      }
    }
  });
  return llvm::Error::success();
}

template <class T>
void transposeTile(T *dst, int64_t dstStrideP, const T *src, int64_t srcStrideN, int64_t p0, int64_t p1, int64_t n) {
  constexpr int64_t kBlock = 32;
  for (int64_t jb = 0; jb < n; jb += kBlock) {
    int64_t je = std::min(n, jb + kBlock);
    for (int64_t p = p0; p < p1; ++p) {
      T *d = dst + p * dstStrideP;
      const T *s = src + p;
      for (int64_t j = jb; j < je; ++j) d[j] = s[j * srcStrideN];
    }
  }
}

// copyStrided when output dim p is contiguous in the source and the output's
// last dim is not (a transpose): 32x32 tiles keep both sides in cache.
// `shape`/`strides` are already coalesced. False: not handled here.
bool copyTransposed(void *dst, const void *src, const Shape &shape, const std::vector<int64_t> &strides, int64_t p,
                    size_t es) {
  if (es != 1 && es != 2 && es != 4 && es != 8) return false;
  constexpr int64_t kBlock = 32;
  int64_t rank = int64_t(shape.size()), inner = shape.back(), innerStride = strides.back();
  std::vector<int64_t> dstStrides = rowMajorStrides(shape);
  std::vector<int64_t> others; // outer dims other than p
  for (int64_t d = 0; d + 1 < rank; ++d)
    if (d != p) others.push_back(d);
  int64_t nOther = 1;
  for (int64_t d : others) nOther *= shape[size_t(d)];
  int64_t pDim = shape[size_t(p)], pBlocks = (pDim + kBlock - 1) / kBlock;
  parallelFor(nOther * pBlocks, kBlock * inner * int64_t(es), [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      int64_t rem = w / pBlocks, srcOff = 0, dstOff = 0;
      for (size_t k = others.size(); k-- > 0;) {
        int64_t d = others[k], i = rem % shape[size_t(d)];
        rem /= shape[size_t(d)];
        srcOff += i * strides[size_t(d)];
        dstOff += i * dstStrides[size_t(d)];
      }
      int64_t p0 = (w % pBlocks) * kBlock, p1 = std::min(pDim, p0 + kBlock);
      auto run = [&](auto *d, const auto *s) {
        transposeTile(d + dstOff, dstStrides[size_t(p)], s + srcOff, innerStride, p0, p1, inner);
      };
      switch (es) {
      case 1: run(static_cast<uint8_t *>(dst), static_cast<const uint8_t *>(src)); break;
      case 2: run(static_cast<uint16_t *>(dst), static_cast<const uint16_t *>(src)); break;
      case 4: run(static_cast<uint32_t *>(dst), static_cast<const uint32_t *>(src)); break;
      default: run(static_cast<uint64_t *>(dst), static_cast<const uint64_t *>(src)); break;
      }
    }
  });
  return true;
}

} // namespace

void copyStrided(void *dst, const void *src, const Shape &outShape, const std::vector<int64_t> &srcStrides,
                 size_t es) {
  int64_t total = numElements(outShape);
  if (total == 0) return;
  // Drop unit dims and merge dims that are contiguous in the source.
  Shape shape;
  std::vector<int64_t> strides;
  for (size_t d = 0; d < outShape.size(); ++d) {
    if (outShape[d] == 1) continue;
    if (!shape.empty() && strides.back() == srcStrides[d] * outShape[d]) {
      shape.back() *= outShape[d];
      strides.back() = srcStrides[d];
    } else {
      shape.push_back(outShape[d]);
      strides.push_back(srcStrides[d]);
    }
  }
  if (shape.empty()) {
    std::memcpy(dst, src, es);
    return;
  }
  int64_t inner = shape.back(), innerStride = strides.back();
  int64_t rows = total / inner, outerRank = int64_t(shape.size()) - 1;
  if (innerStride != 1 && inner >= 16)
    for (int64_t p = 0; p < outerRank; ++p)
      if (strides[size_t(p)] == 1 && shape[size_t(p)] >= 16 && copyTransposed(dst, src, shape, strides, p, es)) return;
  const uint8_t *s8 = static_cast<const uint8_t *>(src);
  uint8_t *d8 = static_cast<uint8_t *>(dst);
  int64_t rowBytes = inner * int64_t(es);
  parallelFor(rows, rowBytes, [&](int64_t b, int64_t e) {
    std::vector<int64_t> idx(static_cast<size_t>(outerRank));
    int64_t rem = b, off = 0;
    for (int64_t d = outerRank - 1; d >= 0; --d) {
      idx[size_t(d)] = rem % shape[size_t(d)];
      rem /= shape[size_t(d)];
      off += idx[size_t(d)] * strides[size_t(d)];
    }
    for (int64_t row = b; row < e; ++row) {
      copyRow(d8 + row * rowBytes, s8 + off * int64_t(es), inner, innerStride, es);
      for (int64_t d = outerRank - 1; d >= 0; --d) {
        off += strides[size_t(d)];
        if (++idx[size_t(d)] < shape[size_t(d)]) break;
        off -= strides[size_t(d)] * shape[size_t(d)];
        idx[size_t(d)] = 0;
      }
    }
  });
}

std::vector<int64_t> intsOrDefault(const Tensor *t, std::vector<int64_t> dflt) {
  return t ? t->toInt64Vector() : std::move(dflt);
}

llvm::Error normalizeIndices(llvm::StringRef op, std::vector<int64_t> &idx, int64_t dim, llvm::StringRef what) {
  for (int64_t &i : idx) {
    if (i < -dim || i >= dim)
      return kernelError(op, (what.empty() ? std::string() : what.str() + " ") + "index " + llvm::Twine(i) +
                                 " is out of range [" + llvm::Twine(-dim) + ", " + llvm::Twine(dim - 1) + "]");
    if (i < 0) i += dim;
  }
  return llvm::Error::success();
}

void registerShapeKernels() {
  registerKernel("Reshape", copyKernel<kReshape>);
  registerKernel("Squeeze", copyKernel<kSqueeze>);
  registerKernel("Unsqueeze", copyKernel<kUnsqueeze>);
  registerKernel("Flatten", copyKernel<kFlatten>);
  registerKernel("Transpose", transposeKernel);
  registerKernel("Concat", concatKernel);
  registerKernel("Split", splitKernel);
  registerKernel("Slice", sliceKernel);
  registerKernel("Expand", expandKernel);
  registerKernel("Tile", tileKernel);
  registerKernel("Pad", padKernel);
  registerGatherScatterKernels();
  registerGeneratorKernels();
}

} // namespace megac::cpu
