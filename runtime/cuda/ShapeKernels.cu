// CUDA kernels of the data-movement ops, with the semantics of the CPU kernels
// in runtime/cpu/ShapeKernels.cpp and BasicGradKernels.cpp (megac.SliceGrad):
// Reshape, Squeeze, Unsqueeze, Flatten, Transpose, Concat, Split, Slice,
// Expand, Tile, Pad. They move bytes, so one kernel serves every dtype.
//
// Most of them are one strided copy: dst at multi-index i is src at
// sum(i[d] * srcStride[d]), written at sum(i[d] * dstStride[d]). The copy
// merges dims that are contiguous on both sides, then
//  - moves whole contiguous rows in units of up to 16 bytes where both sides
//    are contiguous along the innermost dim (Concat, Split, Slice with
//    step 1, [B,S,H,D] -> [B,H,S,D]),
//  - uses 32x32 shared-memory tiles when the output's innermost dim is
//    strided in the source but another dim is contiguous there (a
//    transpose that moves the last dim),
//  - otherwise gathers element by element.
#include "runtime/cpu/ShapeSemantics.h"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/ElementwiseIndexing.cuh"
#include "runtime/cuda/GpuKernel.h"

#include <algorithm>
#include <cstring>

namespace megac::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxCopyDims = 12;
constexpr int kMaxPadDims = 8;
constexpr int kTile = 32;
constexpr int kTileRows = 8; // threads per tile column: a block is kTile x kTileRows

// ---------------------------------------------------------------------------
// Kernels

// Operand 0 of `calc` is dst, operand 1 is src.
template <class E, class Calc>
__global__ void __launch_bounds__(kThreads) stridedCopyKernel(E *dst, const E *src, Calc calc, typename Calc::Index n) {
  using I = typename Calc::Index;
  const I step = I(gridDim.x) * blockDim.x;
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    typename Calc::Offset off[2];
    calc.get(i, off);
    dst[off[0]] = src[off[1]];
  }
}

// A transpose-like copy: `rows` (p) is contiguous in src, `cols` (l, the
// innermost dim) is contiguous in dst; the other dims (innermost first) only
// offset whole tiles.
struct TileSpec {
  int64_t rows = 0, cols = 0;
  int64_t rowDstStride = 0, colSrcStride = 0;
  int64_t rowTiles = 0, colTiles = 0, tiles = 0;
  int nOther = 0;
  int64_t otherSizes[kMaxCopyDims] = {};
  int64_t otherDst[kMaxCopyDims] = {};
  int64_t otherSrc[kMaxCopyDims] = {};
};

template <class T> __global__ void __launch_bounds__(kTile *kTileRows) transposeTileKernel(T *dst, const T *src, TileSpec t) {
  __shared__ T tile[kTile][kTile + 1];
  for (int64_t w = blockIdx.x; w < t.tiles; w += gridDim.x) {
    int64_t rest = w;
    const int64_t c0 = (rest % t.colTiles) * kTile;
    rest /= t.colTiles;
    const int64_t r0 = (rest % t.rowTiles) * kTile;
    rest /= t.rowTiles;
    int64_t dstBase = 0, srcBase = 0;
#pragma unroll
    for (int k = 0; k < kMaxCopyDims; ++k) {
      if (k == t.nOther) break;
      const int64_t i = rest % t.otherSizes[k];
      rest /= t.otherSizes[k];
      dstBase += i * t.otherDst[k];
      srcBase += i * t.otherSrc[k];
    }
    // Read along the rows (contiguous in src)...
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t c = c0 + j, r = r0 + threadIdx.x;
      if (c < t.cols && r < t.rows) tile[j][threadIdx.x] = src[srcBase + c * t.colSrcStride + r];
    }
    __syncthreads();
    // ...write along the columns (contiguous in dst).
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t r = r0 + j, c = c0 + threadIdx.x;
      if (r < t.rows && c < t.cols) dst[dstBase + r * t.rowDstStride + c] = tile[threadIdx.x][j];
    }
    __syncthreads();
  }
}

// Pad: per axis, innermost first.
struct PadSpec {
  int rank = 0;
  int mode = 0; // kPadConstant...
  int64_t outSizes[kMaxPadDims] = {};
  int64_t inSizes[kMaxPadDims] = {};
  int64_t inStrides[kMaxPadDims] = {};
  int64_t before[kMaxPadDims] = {};
};
enum PadMode { kPadConstant = 0, kPadEdge = 1, kPadWrap = 2, kPadReflect = 3 };

// Source coordinate of output coordinate o along a padded axis; -1: the
// constant. The CPU kernel's padSource.
__device__ __forceinline__ int64_t padSource(int64_t o, int64_t before, int64_t dim, int mode) {
  int64_t c = o - before;
  if (c >= 0 && c < dim) return c;
  if (mode == kPadConstant || dim == 0) return -1;
  if (mode == kPadEdge) return c < 0 ? 0 : dim - 1;
  if (mode == kPadWrap) return ((c % dim) + dim) % dim;
  if (dim == 1) return 0;
  const int64_t period = 2 * (dim - 1);
  c = ((c % period) + period) % period;
  return c < dim ? c : period - c;
}

// `fillValue` is *fillPtr when given (a device scalar), else `fill`.
template <class T>
__global__ void __launch_bounds__(kThreads) padKernel(T *out, const T *in, PadSpec p, T fill, const T *fillPtr, int64_t n) {
  const T value = fillPtr ? *fillPtr : fill;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t rest = i, off = 0;
    bool constant = false;
#pragma unroll
    for (int d = 0; d < kMaxPadDims; ++d) {
      if (d == p.rank) break;
      const int64_t o = rest % p.outSizes[d];
      rest /= p.outSizes[d];
      const int64_t s = padSource(o, p.before[d], p.inSizes[d], p.mode);
      if (s < 0) constant = true;
      else off += s * p.inStrides[d];
    }
    out[i] = constant ? value : in[off];
  }
}

// ---------------------------------------------------------------------------
// The strided copy (host side)

// Copies shape's elements: dst + sum(i*dstStrides) = src + sum(i*srcStrides)
// (element strides, outermost first; src strides may be 0 or negative).
struct CopySpec {
  Shape shape;
  std::vector<int64_t> dst, src;
};

// Drops unit dims and merges each dim into the previous one where both sides
// continue contiguously.
CopySpec coalesce(const CopySpec &in) {
  CopySpec out;
  for (size_t d = 0; d < in.shape.size(); ++d) {
    if (in.shape[d] == 1) continue;
    if (!out.shape.empty() && out.src.back() == in.src[d] * in.shape[d] && out.dst.back() == in.dst[d] * in.shape[d]) {
      out.shape.back() *= in.shape[d];
      out.src.back() = in.src[d];
      out.dst.back() = in.dst[d];
      continue;
    }
    out.shape.push_back(in.shape[d]);
    out.src.push_back(in.src[d]);
    out.dst.push_back(in.dst[d]);
  }
  return out;
}

template <class E, bool Wide>
llvm::Error launchGather(cudaStream_t stream, void *dst, const void *src, const StridedSpace<2, kMaxCopyDims> &space,
                         int64_t n) {
  using Calc = OffsetCalc<2, kMaxCopyDims, Wide>;
  Calc calc(space);
  const auto count = typename Calc::Index(n);
  stridedCopyKernel<E, Calc><<<gridFor(n, kThreads), kThreads, 0, stream>>>(static_cast<E *>(dst),
                                                                             static_cast<const E *>(src), calc, count);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

template <class E>
llvm::Error launchGatherTyped(cudaStream_t stream, void *dst, const void *src,
                              const StridedSpace<2, kMaxCopyDims> &space, int64_t n) {
  if (fitsIn32Bits(space)) return launchGather<E, false>(stream, dst, src, space, n);
  return launchGather<E, true>(stream, dst, src, space, n);
}

// The tiled transpose when it applies (see TileSpec); false otherwise.
template <class T>
llvm::Expected<bool> tryTransposeTiles(cudaStream_t stream, void *dst, const void *src, const CopySpec &c) {
  const size_t rank = c.shape.size();
  if (rank < 2 || c.dst.back() != 1 || c.src.back() == 1 || c.shape.back() < 16) return false;
  size_t p = rank;
  for (size_t d = 0; d + 1 < rank; ++d)
    if (c.src[d] == 1 && c.shape[d] >= 16) p = d;
  if (p == rank) return false;
  TileSpec t;
  t.rows = c.shape[p];
  t.cols = c.shape.back();
  t.rowDstStride = c.dst[p];
  t.colSrcStride = c.src.back();
  t.rowTiles = (t.rows + kTile - 1) / kTile;
  t.colTiles = (t.cols + kTile - 1) / kTile;
  t.tiles = t.rowTiles * t.colTiles;
  for (size_t d = rank - 1; d-- > 0;) { // innermost first
    if (d == p) continue;
    t.otherSizes[t.nOther] = c.shape[d];
    t.otherDst[t.nOther] = c.dst[d];
    t.otherSrc[t.nOther] = c.src[d];
    ++t.nOther;
    t.tiles *= c.shape[d];
  }
  const unsigned blocks = unsigned(std::min<int64_t>(t.tiles, 65535 * 8));
  transposeTileKernel<T><<<blocks, dim3(kTile, kTileRows), 0, stream>>>(static_cast<T *>(dst),
                                                                         static_cast<const T *>(src), t);
  MEGAC_CUDA_LAUNCHED();
  return true;
}

// Widens elements to W bytes where both sides are contiguous along the
// innermost dim and every stride, the row and both pointers are multiples
// of W: the copy then moves up to 16 bytes per thread.
size_t widenUnits(CopySpec &c, size_t es, const void *dst, const void *src) {
  if (c.dst.back() != 1 || c.src.back() != 1) return es;
  for (size_t w : {size_t(16), size_t(8), size_t(4), size_t(2)}) {
    if (w <= es || w % es != 0) continue;
    const int64_t per = int64_t(w / es);
    bool ok = c.shape.back() % per == 0 && isAligned(dst, w) && isAligned(src, w);
    for (size_t d = 0; ok && d + 1 < c.shape.size(); ++d) ok = c.dst[d] % per == 0 && c.src[d] % per == 0;
    if (!ok) continue;
    c.shape.back() /= per;
    for (size_t d = 0; d + 1 < c.shape.size(); ++d) {
      c.dst[d] /= per;
      c.src[d] /= per;
    }
    return w;
  }
  return es;
}

llvm::Error stridedCopy(llvm::StringRef op, cudaStream_t stream, void *dst, const void *src, const CopySpec &spec,
                        size_t es) {
  const int64_t n = numElements(spec.shape);
  if (n == 0) return llvm::Error::success();
  CopySpec c = coalesce(spec);
  if (c.shape.empty()) {
    MEGAC_CUDA_TRY(cudaMemcpyAsync(dst, src, es, cudaMemcpyDeviceToDevice, stream));
    return llvm::Error::success();
  }
  if (c.shape.size() == 1 && c.dst[0] == 1 && c.src[0] == 1) {
    MEGAC_CUDA_TRY(cudaMemcpyAsync(dst, src, size_t(n) * es, cudaMemcpyDeviceToDevice, stream));
    return llvm::Error::success();
  }
  if (c.shape.size() > size_t(kMaxCopyDims))
    return gpuKernelError(op, "the copy has " + llvm::Twine(c.shape.size()) +
                                  " dims after merging; the CUDA kernel handles at most " + llvm::Twine(kMaxCopyDims));
  if (es != 1 && es != 2 && es != 4 && es != 8)
    return gpuKernelError(op, "unsupported element size " + llvm::Twine(es));
  auto tiled = es == 1   ? tryTransposeTiles<uint8_t>(stream, dst, src, c)
               : es == 2 ? tryTransposeTiles<uint16_t>(stream, dst, src, c)
               : es == 4 ? tryTransposeTiles<uint32_t>(stream, dst, src, c)
                         : tryTransposeTiles<uint64_t>(stream, dst, src, c);
  if (!tiled) return tiled.takeError();
  if (*tiled) return llvm::Error::success();

  const size_t unit = widenUnits(c, es, dst, src);
  StridedSpace<2, kMaxCopyDims> space;
  space.rank = int(c.shape.size());
  int64_t units = 1;
  for (int d = 0; d < space.rank; ++d) {
    size_t from = c.shape.size() - 1 - size_t(d); // innermost first
    space.sizes[d] = c.shape[from];
    space.strides[d][0] = c.dst[from];
    space.strides[d][1] = c.src[from];
    units *= c.shape[from];
  }
  switch (unit) {
  case 1: return launchGatherTyped<uint8_t>(stream, dst, src, space, units);
  case 2: return launchGatherTyped<uint16_t>(stream, dst, src, space, units);
  case 4: return launchGatherTyped<uint32_t>(stream, dst, src, space, units);
  case 8: return launchGatherTyped<unsigned long long>(stream, dst, src, space, units);
  default: return launchGatherTyped<uint4>(stream, dst, src, space, units);
  }
}

// ---------------------------------------------------------------------------
// Helpers

llvm::Error requireInputs(llvm::StringRef op, const GpuKernelContext &ctx, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!ctx.input(i)) return gpuKernelError(op, "input " + llvm::Twine(i) + " is required");
  if (!ctx.output(0)) return gpuKernelError(op, "output 0 is missing");
  return llvm::Error::success();
}

// The values of shape-like input i, which must be a plan constant; `dflt`
// when the input is omitted.
llvm::Expected<std::vector<int64_t>> constInts(llvm::StringRef op, const GpuKernelContext &ctx, size_t i,
                                               llvm::StringRef what, std::vector<int64_t> dflt = {}) {
  if (!ctx.input(i)) return dflt;
  const Tensor *t = ctx.constant(i);
  if (!t) return gpuKernelError(op, what + " (input " + llvm::Twine(i) + ") must be a constant");
  return t->toInt64Vector();
}

llvm::Expected<size_t> elementSize(llvm::StringRef op, DType t) {
  size_t es = dtypeSize(t);
  if (es != 1 && es != 2 && es != 4 && es != 8)
    return gpuKernelError(op, llvm::Twine("unsupported element type ") + dtypeName(t));
  return es;
}

int64_t dimsProduct(const Shape &s, int64_t b, int64_t e) {
  int64_t p = 1;
  for (int64_t d = b; d < e; ++d) p *= s[size_t(d)];
  return p;
}

char *bytesAt(void *p, int64_t offset) { return static_cast<char *>(p) + offset; }

// ---------------------------------------------------------------------------
// Kernels by op

// Reshape, Squeeze, Unsqueeze, Flatten: the bytes are unchanged (nothing to
// do when the planner gave the output the input's memory).
template <const char *Name> llvm::Error copyKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs(Name, ctx, 1)) return e;
  const DeviceTensor &in = *ctx.input(0);
  DeviceTensor &out = *ctx.output(0);
  if (in.numel() != out.numel() || in.dtype != out.dtype)
    return gpuKernelError(Name, "input " + llvm::Twine(dtypeName(in.dtype)) + shapeToString(in.shape) +
                                    " cannot become output " + dtypeName(out.dtype) + shapeToString(out.shape));
  if (out.data != in.data && out.nbytes() > 0)
    MEGAC_CUDA_TRY(cudaMemcpyAsync(out.data, in.data, out.nbytes(), cudaMemcpyDeviceToDevice, ctx.gpu.stream));
  return llvm::Error::success();
}
constexpr char kReshape[] = "Reshape", kSqueeze[] = "Squeeze", kUnsqueeze[] = "Unsqueeze", kFlatten[] = "Flatten";

llvm::Error transposeKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs("Transpose", ctx, 1)) return e;
  const DeviceTensor &in = *ctx.input(0);
  DeviceTensor &out = *ctx.output(0);
  const int64_t rank = int64_t(in.shape.size());
  std::vector<int64_t> perm = ctx.attrs.getInts("perm");
  if (perm.empty())
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  if (int64_t(perm.size()) != rank || int64_t(out.shape.size()) != rank || out.dtype != in.dtype)
    return gpuKernelError("Transpose", "perm does not match the input and output ranks");
  auto es = elementSize("Transpose", in.dtype);
  if (!es) return es.takeError();
  CopySpec c{out.shape, rowMajorStrides(out.shape), std::vector<int64_t>(size_t(rank))};
  const std::vector<int64_t> inStrides = rowMajorStrides(in.shape);
  std::vector<bool> seen(size_t(rank), false);
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t p = perm[size_t(d)];
    if (p < 0 || p >= rank || seen[size_t(p)] || out.shape[size_t(d)] != in.shape[size_t(p)])
      return gpuKernelError("Transpose", "invalid perm");
    seen[size_t(p)] = true;
    c.src[size_t(d)] = inStrides[size_t(p)];
  }
  return stridedCopy("Transpose", ctx.gpu.stream, out.data, in.data, c, *es);
}

llvm::Error concatKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs("Concat", ctx, 1)) return e;
  DeviceTensor &out = *ctx.output(0);
  const int64_t rank = int64_t(out.shape.size());
  auto axis = cpu::normalizeAxisIn(ctx.attrs.getInt("axis", 0), rank);
  if (!axis) return gpuKernelError("Concat", llvm::toString(axis.takeError()));
  auto es = elementSize("Concat", out.dtype);
  if (!es) return es.takeError();
  int64_t total = 0;
  for (const DeviceTensor *in : ctx.inputs) {
    if (!in || int64_t(in->shape.size()) != rank || in->dtype != out.dtype)
      return gpuKernelError("Concat", "inputs must all have the output's rank and dtype");
    for (int64_t d = 0; d < rank; ++d)
      if (d != *axis && in->shape[size_t(d)] != out.shape[size_t(d)])
        return gpuKernelError("Concat", "input " + shapeToString(in->shape) + " does not fit the output " +
                                            shapeToString(out.shape) + " outside the axis");
    total += in->shape[size_t(*axis)];
  }
  if (total != out.shape[size_t(*axis)])
    return gpuKernelError("Concat", "input sizes along the axis do not add up to the output");
  const int64_t outer = dimsProduct(out.shape, 0, *axis), inner = dimsProduct(out.shape, *axis + 1, rank);
  const int64_t outRow = out.shape[size_t(*axis)] * inner;
  int64_t at = 0; // elements into an output row
  for (const DeviceTensor *in : ctx.inputs) {
    const int64_t row = in->shape[size_t(*axis)] * inner;
    CopySpec c{{outer, row}, {outRow, 1}, {row, 1}};
    if (auto e = stridedCopy("Concat", ctx.gpu.stream, bytesAt(out.data, at * int64_t(*es)), in->data, c, *es)) return e;
    at += row;
  }
  return llvm::Error::success();
}

// The chunk sizes come from the outputs' shapes; where an output is unused,
// from the constant `split` input or the equal split of the inferred schema.
llvm::Error splitKernel(GpuKernelContext &ctx) {
  if (!ctx.input(0)) return gpuKernelError("Split", "input 0 is required");
  const DeviceTensor &in = *ctx.input(0);
  const int64_t rank = int64_t(in.shape.size());
  auto axis = cpu::normalizeAxisIn(ctx.attrs.getInt("axis", 0), rank);
  if (!axis) return gpuKernelError("Split", llvm::toString(axis.takeError()));
  auto es = elementSize("Split", in.dtype);
  if (!es) return es.takeError();
  const int64_t dim = in.shape[size_t(*axis)], n = int64_t(ctx.outputs.size());
  if (n == 0) return gpuKernelError("Split", "no output");
  std::vector<int64_t> sizes(size_t(n), -1);
  if (std::any_of(ctx.outputs.begin(), ctx.outputs.end(), [](DeviceTensor *o) { return !o; })) {
    if (ctx.input(1)) {
      auto split = constInts("Split", ctx, 1, "split");
      if (!split) return split.takeError();
      if (int64_t(split->size()) != n) return gpuKernelError("Split", "split has a size per output");
      sizes = *split;
    } else {
      const int64_t chunk = (dim + n - 1) / n;
      std::fill(sizes.begin(), sizes.end(), chunk);
      sizes.back() = dim - chunk * (n - 1);
    }
  }
  int64_t total = 0;
  for (int64_t k = 0; k < n; ++k) {
    const DeviceTensor *o = ctx.outputs[size_t(k)];
    if (o) {
      if (int64_t(o->shape.size()) != rank || o->dtype != in.dtype)
        return gpuKernelError("Split", "output rank or dtype mismatch");
      for (int64_t d = 0; d < rank; ++d)
        if (d != *axis && o->shape[size_t(d)] != in.shape[size_t(d)])
          return gpuKernelError("Split", "output " + shapeToString(o->shape) + " does not fit the input " +
                                             shapeToString(in.shape) + " outside the axis");
      sizes[size_t(k)] = o->shape[size_t(*axis)];
    }
    if (sizes[size_t(k)] < 0) return gpuKernelError("Split", "negative output size");
    total += sizes[size_t(k)];
  }
  if (total != dim) return gpuKernelError("Split", "output sizes along the axis do not add up to the input");
  const int64_t outer = dimsProduct(in.shape, 0, *axis), inner = dimsProduct(in.shape, *axis + 1, rank);
  const int64_t inRow = dim * inner;
  int64_t at = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t row = sizes[size_t(k)] * inner;
    if (DeviceTensor *o = ctx.outputs[size_t(k)]) {
      CopySpec c{{outer, row}, {row, 1}, {inRow, 1}};
      if (auto e = stridedCopy("Split", ctx.gpu.stream, o->data, bytesAt(in.data, at * int64_t(*es)), c, *es)) return e;
    }
    at += row;
  }
  return llvm::Error::success();
}

// The slice of `data` that starts/ends/axes/steps (inputs first..first+3,
// all constants) select, as resolved by the CPU's resolveSlice.
llvm::Expected<std::vector<cpu::SliceDim>> resolveConstSlice(llvm::StringRef op, const GpuKernelContext &ctx,
                                                             const Shape &data, size_t first) {
  auto starts = constInts(op, ctx, first, "starts");
  if (!starts) return starts.takeError();
  auto ends = constInts(op, ctx, first + 1, "ends");
  if (!ends) return ends.takeError();
  auto axes = constInts(op, ctx, first + 2, "axes");
  if (!axes) return axes.takeError();
  auto steps = constInts(op, ctx, first + 3, "steps");
  if (!steps) return steps.takeError();
  auto dims = cpu::resolveSlice(data, *starts, *ends, *axes, *steps);
  if (!dims) return gpuKernelError(op, llvm::toString(dims.takeError()));
  return dims;
}

llvm::Error sliceKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs("Slice", ctx, 3)) return e;
  const DeviceTensor &in = *ctx.input(0);
  DeviceTensor &out = *ctx.output(0);
  if (out.dtype != in.dtype || out.shape.size() != in.shape.size())
    return gpuKernelError("Slice", "output rank or dtype mismatch");
  auto es = elementSize("Slice", in.dtype);
  if (!es) return es.takeError();
  auto dims = resolveConstSlice("Slice", ctx, in.shape, 1);
  if (!dims) return dims.takeError();
  const std::vector<int64_t> inStrides = rowMajorStrides(in.shape);
  CopySpec c{out.shape, rowMajorStrides(out.shape), std::vector<int64_t>(dims->size())};
  int64_t offset = 0;
  for (size_t d = 0; d < dims->size(); ++d) {
    const cpu::SliceDim &sd = (*dims)[d];
    if (out.shape[d] != sd.count) return gpuKernelError("Slice", "output shape does not match the slice");
    offset += sd.start * inStrides[d];
    c.src[d] = sd.step * inStrides[d];
  }
  if (out.numel() == 0) return llvm::Error::success();
  return stridedCopy("Slice", ctx.gpu.stream, out.data, bytesAt(in.data, offset * int64_t(*es)), c, *es);
}

// megac.SliceGrad(dY, starts, ends, axes?, steps?): zeros of the output's
// shape with dY written where the slice reads.
llvm::Error sliceGradKernel(GpuKernelContext &ctx) {
  const char *name = "megac.SliceGrad";
  if (auto e = requireInputs(name, ctx, 3)) return e;
  const DeviceTensor &dy = *ctx.input(0);
  DeviceTensor &out = *ctx.output(0);
  if (out.dtype != dy.dtype) return gpuKernelError(name, "output and dY differ in dtype");
  auto es = elementSize(name, dy.dtype);
  if (!es) return es.takeError();
  auto dims = resolveConstSlice(name, ctx, out.shape, 1);
  if (!dims) return dims.takeError();
  Shape sliced;
  for (const cpu::SliceDim &d : *dims) sliced.push_back(d.count);
  if (sliced != dy.shape)
    return gpuKernelError(name, "dY " + shapeToString(dy.shape) + " is not the shape of the slice, " +
                                    shapeToString(sliced));
  if (out.nbytes() > 0) MEGAC_CUDA_TRY(cudaMemsetAsync(out.data, 0, out.nbytes(), ctx.gpu.stream));
  if (dy.numel() == 0) return llvm::Error::success();
  const std::vector<int64_t> outStrides = rowMajorStrides(out.shape);
  CopySpec c{dy.shape, std::vector<int64_t>(dims->size()), rowMajorStrides(dy.shape)};
  int64_t offset = 0;
  for (size_t d = 0; d < dims->size(); ++d) {
    offset += (*dims)[d].start * outStrides[d];
    c.dst[d] = (*dims)[d].step * outStrides[d];
  }
  return stridedCopy(name, ctx.gpu.stream, bytesAt(out.data, offset * int64_t(*es)), dy.data, c, *es);
}

llvm::Error expandKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs("Expand", ctx, 1)) return e;
  const DeviceTensor &in = *ctx.input(0);
  DeviceTensor &out = *ctx.output(0);
  const int64_t inRank = int64_t(in.shape.size()), outRank = int64_t(out.shape.size());
  const auto notBroadcast = [&] {
    return gpuKernelError("Expand", "input " + shapeToString(in.shape) + " does not broadcast to " +
                                        shapeToString(out.shape));
  };
  if (inRank > outRank || in.dtype != out.dtype) return notBroadcast();
  auto es = elementSize("Expand", in.dtype);
  if (!es) return es.takeError();
  const std::vector<int64_t> inStrides = rowMajorStrides(in.shape);
  CopySpec c{out.shape, rowMajorStrides(out.shape), std::vector<int64_t>(size_t(outRank), 0)};
  const int64_t lead = outRank - inRank;
  for (int64_t d = 0; d < inRank; ++d) {
    const int64_t id = in.shape[size_t(d)], od = out.shape[size_t(d + lead)];
    if (id != od && id != 1) return notBroadcast();
    c.src[size_t(d + lead)] = id == 1 ? 0 : inStrides[size_t(d)];
  }
  return stridedCopy("Expand", ctx.gpu.stream, out.data, in.data, c, *es);
}

// The output, viewed as [r0, d0, r1, d1, ...], reads the input with stride 0
// over each repeat.
llvm::Error tileKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs("Tile", ctx, 1)) return e;
  const DeviceTensor &in = *ctx.input(0);
  DeviceTensor &out = *ctx.output(0);
  if (out.shape.size() != in.shape.size() || out.dtype != in.dtype)
    return gpuKernelError("Tile", "output rank mismatch");
  auto es = elementSize("Tile", in.dtype);
  if (!es) return es.takeError();
  const std::vector<int64_t> inStrides = rowMajorStrides(in.shape);
  CopySpec c;
  for (size_t d = 0; d < in.shape.size(); ++d) {
    const int64_t id = in.shape[d], od = out.shape[d];
    if (id == 0 ? od != 0 : od % id != 0) return gpuKernelError("Tile", "output is not a whole number of repeats");
    c.shape.push_back(id == 0 ? 0 : od / id);
    c.src.push_back(0);
    c.shape.push_back(id);
    c.src.push_back(inStrides[d]);
  }
  c.dst = rowMajorStrides(c.shape);
  if (out.numel() == 0) return llvm::Error::success();
  return stridedCopy("Tile", ctx.gpu.stream, out.data, in.data, c, *es);
}

template <class T>
llvm::Error launchPad(cudaStream_t stream, const DeviceTensor &out, const DeviceTensor &in, const PadSpec &p,
                      const void *fillBytes, const void *fillPtr) {
  T fill;
  std::memcpy(&fill, fillBytes, sizeof(T));
  const int64_t n = out.numel();
  padKernel<T><<<gridFor(n, kThreads), kThreads, 0, stream>>>(static_cast<T *>(out.data),
                                                              static_cast<const T *>(in.data), p, fill,
                                                              static_cast<const T *>(fillPtr), n);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

llvm::Error padKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs("Pad", ctx, 2)) return e;
  const DeviceTensor &in = *ctx.input(0);
  DeviceTensor &out = *ctx.output(0);
  const std::string mode = ctx.attrs.getString("mode", "constant");
  PadSpec p;
  if (mode == "constant") p.mode = kPadConstant;
  else if (mode == "edge") p.mode = kPadEdge;
  else if (mode == "wrap") p.mode = kPadWrap;
  else if (mode == "reflect") p.mode = kPadReflect;
  else return gpuKernelError("Pad", "unknown mode '" + mode + "'");
  const int64_t rank = int64_t(in.shape.size());
  auto padsIn = constInts("Pad", ctx, 1, "pads");
  if (!padsIn) return padsIn.takeError();
  auto axes = constInts("Pad", ctx, 3, "axes");
  if (!axes) return axes.takeError();
  auto pads = cpu::resolvePads(rank, *padsIn, *axes);
  if (!pads) return gpuKernelError("Pad", llvm::toString(pads.takeError()));
  if (int64_t(out.shape.size()) != rank || out.dtype != in.dtype)
    return gpuKernelError("Pad", "output rank or dtype mismatch");
  for (int64_t d = 0; d < rank; ++d)
    if (out.shape[size_t(d)] != in.shape[size_t(d)] + (*pads)[size_t(d)] + (*pads)[size_t(d + rank)])
      return gpuKernelError("Pad", "output shape does not match the pads");
  if (mode != "constant" && in.numel() == 0 && out.numel() != 0)
    return gpuKernelError("Pad", "cannot " + mode + "-pad an empty tensor");
  if (rank > kMaxPadDims)
    return gpuKernelError("Pad", "the CUDA kernel pads at most " + llvm::Twine(kMaxPadDims) + " dims");
  auto es = elementSize("Pad", in.dtype);
  if (!es) return es.takeError();
  if (out.numel() == 0) return llvm::Error::success();

  // The constant: converted as the CPU does where it is a plan constant, read
  // on the device where it is a tensor of the data's type, else 0.
  Tensor fill(out.dtype, {});
  const void *fillPtr = nullptr;
  if (const DeviceTensor *v = ctx.input(2); v && v->numel() > 0) {
    if (const Tensor *host = ctx.constant(2)) fill.setFromDouble(0, host->getAsDouble(0));
    else if (v->dtype == out.dtype) fillPtr = v->data;
    else return gpuKernelError("Pad", "constant_value must be a constant or have the data's element type");
  }

  const std::vector<int64_t> inStrides = rowMajorStrides(in.shape);
  p.rank = int(rank);
  for (int64_t d = 0; d < rank; ++d) {
    const size_t from = size_t(rank - 1 - d); // innermost first
    p.outSizes[d] = out.shape[from];
    p.inSizes[d] = in.shape[from];
    p.inStrides[d] = inStrides[from];
    p.before[d] = (*pads)[from];
  }
  switch (*es) {
  case 1: return launchPad<uint8_t>(ctx.gpu.stream, out, in, p, fill.raw(), fillPtr);
  case 2: return launchPad<uint16_t>(ctx.gpu.stream, out, in, p, fill.raw(), fillPtr);
  case 4: return launchPad<uint32_t>(ctx.gpu.stream, out, in, p, fill.raw(), fillPtr);
  default: return launchPad<uint64_t>(ctx.gpu.stream, out, in, p, fill.raw(), fillPtr);
  }
}

} // namespace

void registerShapeGpuKernels() {
  registerGpuKernel("Reshape", copyKernel<kReshape>);
  registerGpuKernel("Squeeze", copyKernel<kSqueeze>);
  registerGpuKernel("Unsqueeze", copyKernel<kUnsqueeze>);
  registerGpuKernel("Flatten", copyKernel<kFlatten>);
  registerGpuKernel("Transpose", transposeKernel);
  registerGpuKernel("Concat", concatKernel);
  registerGpuKernel("Split", splitKernel);
  registerGpuKernel("Slice", sliceKernel);
  registerGpuKernel("megac.SliceGrad", sliceGradKernel);
  registerGpuKernel("Expand", expandKernel);
  registerGpuKernel("Tile", tileKernel);
  registerGpuKernel("Pad", padKernel);
}

} // namespace megac::cuda
