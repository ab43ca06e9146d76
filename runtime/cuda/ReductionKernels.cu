// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceSumSquare, ReduceL1,
// ReduceL2 (axes as constant input 1, keepdims, noop_with_empty_axes) and
// megac.SumToShape, with the CPU kernels' semantics
// (runtime/cpu/ReductionKernels.cpp, TrainingKernels.cpp). Floats accumulate
// in fp32 (the CPU uses double), integers in int64 wrapping like the CPU.
//
// After dropping extent-1 dims and merging neighbours with the same role,
// the input is [outer, R, inner] when the reduced dims form one block:
//  - inner == 1: rows of R; a warp per short row, a block per long row, and
//    R split across blocks (partials in the workspace, combined by a second
//    kernel) when there are too few rows to fill the GPU.
//  - inner > 1: a block per tile of columns, threads over inner (coalesced)
//    looping over R; R is split across blocks the same way when outer*inner
//    is small (e.g. a bias gradient [16384, 3072] -> [3072]).
// Otherwise a general path runs a warp per output and decodes offsets.
// Every path combines in a fixed order: results are reproducible.
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuKernel.h"
#include "runtime/cuda/ReduceLaunch.h"
#include "runtime/cpu/ReduceGroups.h"
#include "runtime/cpu/ReduceOps.h"
#include "runtime/cuda/RowReduce.cuh"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace megac::cuda {

namespace {

using namespace rowops;

using cpu::reduce::ReduceKind; // the GPU has Sum, Mean, Max, Min, SumSquare, L1, L2
using cpu::reduce::reduceName;

template <class T> struct AccOf { using type = float; };
template <> struct AccOf<int32_t> { using type = int64_t; };
template <> struct AccOf<int64_t> { using type = int64_t; };

// identity, term (what each element contributes), combine and finish (the
// final value from the combined accumulator and the reduced count).
template <ReduceKind K, class T> struct Reducer {
  using Acc = typename AccOf<T>::type;

  // The rules are the CPU's (runtime/cpu/ReduceOps.h).
  __device__ static Acc identity() {
    if constexpr (K == ReduceKind::Max) return cpu::reduce::maxIdentity<T, Acc>();
    else if constexpr (K == ReduceKind::Min) return cpu::reduce::minIdentity<T, Acc>();
    else return Acc(0);
  }
  __device__ static Acc term(T v) {
    if constexpr (K == ReduceKind::SumSquare || K == ReduceKind::L2) return cpu::reduce::square<Acc>(v);
    else if constexpr (K == ReduceKind::L1) return cpu::reduce::magnitude<Acc>(v);
    else return Acc(v);
  }
  __device__ static Acc combine(Acc a, Acc b) {
    if constexpr (K == ReduceKind::Max) return cpu::reduce::maxCombine(a, b);
    else if constexpr (K == ReduceKind::Min) return cpu::reduce::minCombine(a, b);
    else return cpu::reduce::wrapAdd(a, b);
  }
  __device__ static T finish(Acc a, int64_t count) {
    if constexpr (K == ReduceKind::Mean) return T(cpu::reduce::meanOf(a, count));
    else if constexpr (K == ReduceKind::L2) return cpu::math::sqrt(a);
    else return T(a);
  }
};

template <class R> struct CombineOp {
  template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return R::combine(a, b); }
};

// --- Plan ---

constexpr int kMaxGroups = 8;
constexpr int64_t kTargetBlocks = 1024; // enough blocks to fill an H200 several times over
constexpr unsigned kBlockThreads = 256;

// Kept and reduced dim groups of the general path, with their strides.
struct GeneralIndex {
  int keptRank = 0, redRank = 0;
  int64_t keptExtent[kMaxGroups] = {}, keptStride[kMaxGroups] = {};
  int64_t redExtent[kMaxGroups] = {}, redStride[kMaxGroups] = {};

  // Offset of the i-th combination (row-major) of the given groups.
  __device__ static int64_t offset(int64_t i, const int64_t *extent, const int64_t *stride, int rank) {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += (i % extent[d]) * stride[d];
      i /= extent[d];
    }
    return off;
  }
};

struct ReducePlan {
  int64_t outCount = 1, redCount = 1;
  bool blocked = true;
  int64_t outer = 1, inner = 1; // blocked: x is [outer, redCount, inner]
  int64_t splits = 1;           // blocks sharing one output's reduced range
  unsigned tileX = 32;          // inner > 1: columns per block
  GeneralIndex general;         // !blocked
};

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

void chooseSplits(ReducePlan &p) {
  const int64_t R = p.redCount;
  if (!p.blocked || p.outCount == 0) return;
  if (p.inner == 1) {
    if (p.outer < kTargetBlocks && R > 8192)
      p.splits = std::max<int64_t>(1, std::min(ceilDiv(R, 4096), ceilDiv(kTargetBlocks, p.outer)));
    return;
  }
  unsigned tx = 2;
  while (tx < 32 && int64_t(tx) < p.inner) tx *= 2;
  p.tileX = tx;
  const int64_t tileY = kBlockThreads / tx, base = p.outer * ceilDiv(p.inner, tx);
  if (base < kTargetBlocks && R > 4 * tileY)
    p.splits = std::max<int64_t>(1, std::min(ceilDiv(kTargetBlocks, base), ceilDiv(R, 4 * tileY)));
}

// The CPU's dim grouping (runtime/cpu/ReduceGroups.h, written once for both).
llvm::Expected<ReducePlan> planReduce(llvm::StringRef op, const Shape &shape, const std::vector<bool> &reduced) {
  ReducePlan p;
  const cpu::ReduceGroups rg = cpu::groupReduceDims(shape, reduced);
  const auto &groups = rg.groups;
  using Group = cpu::ReduceGroups::Group;
  p.outCount = rg.outCount;
  p.redCount = rg.redCount;
  p.outer = rg.outer;
  p.inner = rg.inner;
  if (!rg.blocked) {
    p.blocked = false;
    GeneralIndex &g = p.general;
    for (const Group &gr : groups) {
      int &rank = gr.reduced ? g.redRank : g.keptRank;
      if (rank == kMaxGroups)
        return gpuKernelError(op, "too many alternating reduced and kept dims in " + shapeToString(shape));
      ++rank;
    }
    // Groups are contiguous: a group's stride is the product of the later extents.
    int kept = g.keptRank, red = g.redRank;
    int64_t s = 1;
    for (size_t i = groups.size(); i-- > 0;) {
      if (groups[i].reduced) {
        --red;
        g.redExtent[red] = groups[i].extent;
        g.redStride[red] = s;
      } else {
        --kept;
        g.keptExtent[kept] = groups[i].extent;
        g.keptStride[kept] = s;
      }
      s *= groups[i].extent;
    }
  }
  chooseSplits(p);
  return p;
}

size_t workspaceBytes(const ReducePlan &p, size_t accBytes) {
  if (p.splits <= 1) return 0;
  return size_t(p.outer * p.splits * p.inner) * accBytes;
}

// --- Kernels ---

// A warp per row of R contiguous elements; 8 rows per block.
template <class R, class T>
__global__ void rowReduceWarp(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int64_t len, int64_t count) {
  using Acc = typename R::Acc;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return; // whole warps leave together
  const int lane = threadIdx.x % kWarpSize;
  const T *p = x + row * len;
  Acc acc = R::identity();
  for (int64_t r = lane; r < len; r += kWarpSize) acc = R::combine(acc, R::term(p[r]));
  acc = warpReduce(acc, CombineOp<R>());
  if (lane == 0) y[row] = R::finish(acc, count);
}

// A block per (row, split): reduces the split's chunk of the row into
// partial[row * splits + split], or finishes y[row] when partial is null.
template <class R, class T>
__global__ void rowReduceBlock(const T *__restrict__ x, T *__restrict__ y, typename R::Acc *__restrict__ partial,
                               int64_t len, int64_t splits, int64_t chunk, int64_t count) {
  using Acc = typename R::Acc;
  __shared__ Acc scratch[32];
  const int64_t b = blockIdx.x, row = b / splits, split = b % splits;
  const int64_t begin = split * chunk, end = min(len, begin + chunk);
  const T *p = x + row * len;
  Acc acc = R::identity();
#pragma unroll 4
  for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x) acc = R::combine(acc, R::term(p[r]));
  acc = blockReduce(acc, CombineOp<R>(), R::identity(), scratch);
  if (threadIdx.x != 0) return;
  if (partial) partial[b] = acc;
  else y[row] = R::finish(acc, count);
}

// Block (tileX, tileY) per (outer index, column tile, split): threads over
// columns, looping over the split's rows of R. Writes
// partial[(o * splits + split) * inner + c], or finishes y[o * inner + c].
template <class R, class T>
__global__ void colReduce(const T *__restrict__ x, T *__restrict__ y, typename R::Acc *__restrict__ partial,
                          int64_t len, int64_t inner, int64_t tiles, int64_t splits, int64_t chunk, int64_t count) {
  using Acc = typename R::Acc;
  __shared__ Acc scratch[kBlockThreads];
  const int64_t b = blockIdx.x, split = b % splits, tile = (b / splits) % tiles, o = b / (splits * tiles);
  const int64_t c = tile * blockDim.x + threadIdx.x;
  Acc acc = R::identity();
  if (c < inner) {
    const int64_t begin = split * chunk, end = min(len, begin + chunk);
    const T *p = x + o * len * inner + c;
#pragma unroll 4
    for (int64_t r = begin + threadIdx.y; r < end; r += blockDim.y) acc = R::combine(acc, R::term(p[r * inner]));
  }
  scratch[threadIdx.y * blockDim.x + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= inner) return;
  for (unsigned k = 1; k < blockDim.y; ++k) acc = R::combine(acc, scratch[k * blockDim.x + threadIdx.x]);
  if (partial) partial[(o * splits + split) * inner + c] = acc;
  else y[o * inner + c] = R::finish(acc, count);
}

// Second pass: y[o * inner + c] = finish(combine over splits of partial).
template <class R, class T>
__global__ void combineSplits(const typename R::Acc *__restrict__ partial, T *__restrict__ y, int64_t outCount,
                              int64_t splits, int64_t inner, int64_t count) {
  using Acc = typename R::Acc;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < outCount; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / inner, c = i % inner;
    const Acc *p = partial + o * splits * inner + c;
    Acc acc = R::identity();
    for (int64_t s = 0; s < splits; ++s) acc = R::combine(acc, p[s * inner]);
    y[i] = R::finish(acc, count);
  }
}

// Non-contiguous reduced dims: a warp per output, 8 outputs per block.
template <class R, class T>
__global__ void generalReduce(const T *__restrict__ x, T *__restrict__ y, int64_t outCount, int64_t len, GeneralIndex g,
                              int64_t count) {
  using Acc = typename R::Acc;
  const int64_t o = int64_t(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (o >= outCount) return;
  const int lane = threadIdx.x % kWarpSize;
  const T *base = x + GeneralIndex::offset(o, g.keptExtent, g.keptStride, g.keptRank);
  Acc acc = R::identity();
  for (int64_t r = lane; r < len; r += kWarpSize)
    acc = R::combine(acc, R::term(base[GeneralIndex::offset(r, g.redExtent, g.redStride, g.redRank)]));
  acc = warpReduce(acc, CombineOp<R>());
  if (lane == 0) y[o] = R::finish(acc, count);
}

template <ReduceKind K, class T>
llvm::Error launchReduce(const T *x, T *y, const ReducePlan &p, void *workspace, size_t wsBytes, cudaStream_t stream,
                         llvm::StringRef op) {
  using R = Reducer<K, T>;
  using Acc = typename R::Acc;
  const int64_t n = p.outCount, len = p.redCount, count = p.redCount;
  if (n == 0) return llvm::Error::success();
  const unsigned warpsPerBlock = kBlockThreads / kWarpSize;
  if (!p.blocked) {
    generalReduce<R, T>
        <<<unsigned(ceilDiv(n, warpsPerBlock)), kBlockThreads, 0, stream>>>(x, y, n, len, p.general, count);
    MEGAC_CUDA_LAUNCHED();
    return llvm::Error::success();
  }
  Acc *partial = nullptr;
  if (p.splits > 1) {
    if (!workspace || wsBytes < workspaceBytes(p, sizeof(Acc)))
      return gpuKernelError(op, "workspace is smaller than the reduction needs");
    partial = static_cast<Acc *>(workspace);
  }
  const int64_t chunk = ceilDiv(len, p.splits);
  if (p.inner == 1) {
    if (p.splits == 1 && len <= 1024) {
      rowReduceWarp<R, T>
          <<<unsigned(ceilDiv(p.outer, warpsPerBlock)), kBlockThreads, 0, stream>>>(x, y, p.outer, len, count);
    } else {
      rowReduceBlock<R, T>
          <<<unsigned(p.outer * p.splits), kBlockThreads, 0, stream>>>(x, y, partial, len, p.splits, chunk, count);
    }
  } else {
    const int64_t tiles = ceilDiv(p.inner, p.tileX);
    dim3 block(p.tileX, kBlockThreads / p.tileX);
    colReduce<R, T><<<unsigned(p.outer * tiles * p.splits), block, 0, stream>>>(x, y, partial, len, p.inner, tiles,
                                                                                p.splits, chunk, count);
  }
  MEGAC_CUDA_LAUNCHED();
  if (partial) {
    combineSplits<R, T><<<gridFor(n), 256, 0, stream>>>(partial, y, n, p.splits, p.inner, count);
    MEGAC_CUDA_LAUNCHED();
  }
  return llvm::Error::success();
}

// --- Reduce* ops ---

// What a Reduce* op does with these inputs: copy (noop) or reduce by plan.
struct ReduceSetup {
  bool noop = false;
  ReducePlan plan;
};

llvm::Expected<ReduceSetup> setupReduce(llvm::StringRef op, const GpuKernelContext &ctx) {
  const DeviceTensor *x = ctx.input(0), *y = ctx.output(0);
  if (!x || !y) return gpuKernelError(op, "needs a data input and an output");
  if (y->dtype != x->dtype) return gpuKernelError(op, "output element type differs from the input's");
  const int64_t rank = int64_t(x->shape.size());
  std::vector<int64_t> axes;
  if (ctx.input(1)) {
    const Tensor *a = ctx.constant(1);
    if (!a) return gpuKernelError(op, "axes (input 1) must be a constant");
    if (a->dtype() != DType::I64 && a->dtype() != DType::I32) return gpuKernelError(op, "axes must be an int64 tensor");
    axes = a->toInt64Vector();
  }
  ReduceSetup s;
  if (axes.empty() && ctx.attrs.getInt("noop_with_empty_axes", 0) != 0) {
    if (y->numel() != x->numel()) return gpuKernelError(op, "output shape does not match the input (no-op reduction)");
    s.noop = true;
    return s;
  }
  std::vector<bool> reduced;
  std::string bad = cpu::reducedDimsFromAxes(rank, axes, reduced);
  if (!bad.empty()) return gpuKernelError(op, bad);
  auto plan = planReduce(op, x->shape, reduced);
  if (!plan) return plan.takeError();
  if (plan->outCount != y->numel())
    return gpuKernelError(op, "output " + shapeToString(y->shape) + " does not match the reduction of " +
                                  shapeToString(x->shape));
  s.plan = *plan;
  return s;
}

size_t accBytesFor(DType t) { return t == DType::F32 ? sizeof(float) : sizeof(int64_t); }

template <ReduceKind K> size_t reduceWorkspace(const GpuKernelContext &ctx) {
  auto s = setupReduce(reduceName<K>(), ctx);
  if (!s) {
    llvm::consumeError(s.takeError());
    return 0;
  }
  return s->noop ? 0 : workspaceBytes(s->plan, accBytesFor(ctx.input(0)->dtype));
}

template <ReduceKind K> llvm::Error reduceKernel(GpuKernelContext &ctx) {
  constexpr const char *op = reduceName<K>();
  auto s = setupReduce(op, ctx);
  if (!s) return s.takeError();
  const DeviceTensor &x = *ctx.input(0), &y = *ctx.output(0);
  cudaStream_t stream = ctx.gpu.stream;
  if (s->noop) {
    if (y.data != x.data && x.nbytes())
      MEGAC_CUDA_TRY(cudaMemcpyAsync(y.data, x.data, x.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return llvm::Error::success();
  }
  const ReducePlan &p = s->plan;
  switch (x.dtype) {
  case DType::F32:
    return launchReduce<K, float>(x.as<float>(), y.as<float>(), p, ctx.workspace, ctx.workspaceBytes, stream, op);
  case DType::I32:
    if constexpr (K != ReduceKind::L2)
      return launchReduce<K, int32_t>(x.as<int32_t>(), y.as<int32_t>(), p, ctx.workspace, ctx.workspaceBytes, stream,
                                      op);
    break;
  case DType::I64:
    if constexpr (K != ReduceKind::L2)
      return launchReduce<K, int64_t>(x.as<int64_t>(), y.as<int64_t>(), p, ctx.workspace, ctx.workspaceBytes, stream,
                                      op);
    break;
  default: break;
  }
  return gpuKernelError(op, llvm::Twine("unsupported element type ") + dtypeName(x.dtype) + " on the GPU");
}

// --- megac.SumToShape ---

// The reduced-dims mask that sums x down to y (right-aligned broadcast).
llvm::Expected<std::vector<bool>> sumToShapeMask(llvm::StringRef op, const Shape &x, const Shape &y) {
  if (y.size() > x.size())
    return gpuKernelError(op, "target " + shapeToString(y) + " has a higher rank than the input " + shapeToString(x));
  const size_t off = x.size() - y.size();
  std::vector<bool> reduced(x.size(), false);
  for (size_t d = 0; d < x.size(); ++d) {
    if (d < off) {
      reduced[d] = true;
      continue;
    }
    int64_t t = y[d - off];
    if (t != 1 && t != x[d]) return gpuKernelError(op, "cannot sum " + shapeToString(x) + " to " + shapeToString(y));
    reduced[d] = t == 1 && x[d] != 1;
  }
  return reduced;
}

llvm::Expected<ReducePlan> sumToShapePlan(llvm::StringRef op, const Shape &x, const Shape &y) {
  auto mask = sumToShapeMask(op, x, y);
  if (!mask) return mask.takeError();
  return planReduce(op, x, *mask);
}

size_t sumToShapeWorkspace(const GpuKernelContext &ctx) {
  if (!ctx.input(0) || !ctx.output(0)) return 0;
  return sumToShapeWorkspaceBytes(ctx.input(0)->shape, ctx.output(0)->shape);
}

llvm::Error sumToShapeKernel(GpuKernelContext &ctx) {
  const char *op = "megac.SumToShape";
  const DeviceTensor *x = ctx.input(0), *y = ctx.output(0);
  if (!x || !y) return gpuKernelError(op, "needs an input and an output");
  if (x->dtype != DType::F32 || y->dtype != DType::F32)
    return gpuKernelError(op, llvm::Twine("unsupported element type ") + dtypeName(x->dtype) + " on the GPU");
  return sumToShapeF32(op, x->as<float>(), x->shape, y->as<float>(), y->shape, ctx.workspace, ctx.workspaceBytes,
                       ctx.gpu.stream);
}

} // namespace

size_t sumToShapeWorkspaceBytes(const Shape &x, const Shape &y) {
  auto p = sumToShapePlan("megac.SumToShape", x, y);
  if (!p) {
    llvm::consumeError(p.takeError());
    return 0;
  }
  return workspaceBytes(*p, sizeof(float));
}

llvm::Error sumToShapeF32(llvm::StringRef op, const float *x, const Shape &xShape, float *y, const Shape &yShape,
                          void *workspace, size_t wsBytes, cudaStream_t stream) {
  auto p = sumToShapePlan(op, xShape, yShape);
  if (!p) return p.takeError();
  if (p->outCount != numElements(yShape))
    return gpuKernelError(op, "cannot sum " + shapeToString(xShape) + " to " + shapeToString(yShape));
  return launchReduce<ReduceKind::Sum, float>(x, y, *p, workspace, wsBytes, stream, op);
}

void registerReductionGpuKernels() {
  registerGpuKernel("ReduceSum", reduceKernel<ReduceKind::Sum>, reduceWorkspace<ReduceKind::Sum>);
  registerGpuKernel("ReduceMean", reduceKernel<ReduceKind::Mean>, reduceWorkspace<ReduceKind::Mean>);
  registerGpuKernel("ReduceMax", reduceKernel<ReduceKind::Max>, reduceWorkspace<ReduceKind::Max>);
  registerGpuKernel("ReduceMin", reduceKernel<ReduceKind::Min>, reduceWorkspace<ReduceKind::Min>);
  registerGpuKernel("ReduceSumSquare", reduceKernel<ReduceKind::SumSquare>, reduceWorkspace<ReduceKind::SumSquare>);
  registerGpuKernel("ReduceL1", reduceKernel<ReduceKind::L1>, reduceWorkspace<ReduceKind::L1>);
  registerGpuKernel("ReduceL2", reduceKernel<ReduceKind::L2>, reduceWorkspace<ReduceKind::L2>);
  registerGpuKernel("megac.SumToShape", sumToShapeKernel, sumToShapeWorkspace);
}

} // namespace megac::cuda
