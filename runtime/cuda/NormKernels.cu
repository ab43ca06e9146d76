// LayerNormalization, RMSNormalization and their fused gradients
// megac.LayerNormalizationGrad / megac.RMSNormalizationGrad, with the CPU
// kernels' semantics (runtime/cpu/NormKernels.cpp, NNGradKernels.cpp) in
// fp32 (the CPU computes in double). Scale and B broadcast to X
// unidirectionally; the usual case (they cover exactly the normalized dims)
// indexes them by column, any other broadcast decodes the element's index.
//
// Forward: a warp (short rows) or a block per row, the row held in registers
// up to 8K elements (else re-read from memory); the mean, then the squared
// deviations, then the output.
// Gradient: a block per chunk of rows writes dX and accumulates dScale's
// per-block partial sums in the workspace (each column owned by one thread,
// no atomics); a column reduction over the blocks then gives dScale. Where
// Scale is broadcast within the rows, dY * xhat is stored whole and summed
// down to Scale's shape instead. Deterministic either way.
#include "runtime/cpu/NormAttentionShapes.h"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuKernel.h"
#include "runtime/cuda/ReduceLaunch.h"
#include "runtime/cuda/RowReduce.cuh"

#include <algorithm>

namespace megac::cuda {

namespace {

using namespace rowops;

constexpr int kMaxParamRank = 8;

// Where element (row, col) of X finds its Scale (or B) value.
struct ParamIndex {
  bool direct = true; // the offset is col: the parameter covers exactly the normalized dims
  int rank = 0;
  int64_t dims[kMaxParamRank] = {}, strides[kMaxParamRank] = {}; // X's dims; the parameter's strides (0: broadcast)

  // The offset when !direct.
  __device__ int64_t offset(int64_t row, int64_t col, int64_t cols) const {
    int64_t i = row * cols + col, off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += (i % dims[d]) * strides[d];
      i /= dims[d];
    }
    return off;
  }
};

// Kernels are instantiated for direct parameters (the common case, kept
// cheap: no index decoding) and for any broadcast.
template <bool kDirect>
__device__ __forceinline__ int64_t paramOffset(const ParamIndex &p, int64_t row, int64_t col, int64_t cols) {
  if constexpr (kDirect) return col;
  else return p.offset(row, col, cols);
}

llvm::Expected<ParamIndex> paramIndex(llvm::StringRef op, const Shape &param, const Shape &x, int64_t axis,
                                      const char *what) {
  if (auto e = cpu::checkNormParam(param, x, what)) return gpuKernelError(op, llvm::toString(std::move(e)));
  ParamIndex p;
  const size_t lead = x.size() - param.size();
  for (size_t d = 0; d < x.size() && p.direct; ++d) {
    int64_t pd = d >= lead ? param[d - lead] : 1;
    p.direct = int64_t(d) < axis ? pd == 1 : pd == x[d];
  }
  // The general offsets are filled for direct parameters too: a kernel
  // instantiated for broadcast (because Scale or B is) decodes both.
  if (x.size() > size_t(kMaxParamRank)) {
    if (p.direct) return p;
    return gpuKernelError(op, llvm::Twine(what) + " broadcast within the rows needs X of rank <= 8");
  }
  std::vector<int64_t> own = rowMajorStrides(param);
  p.rank = int(x.size());
  for (size_t d = 0; d < x.size(); ++d) {
    p.dims[d] = x[d];
    p.strides[d] = d >= lead && param[d - lead] != 1 ? own[d - lead] : 0;
  }
  return p;
}

// An optional statistics output (Mean, InvStdDev) of the stash type.
struct StatOut {
  void *data = nullptr;
  bool f64 = false;
  __device__ void store(int64_t i, float v) const {
    if (!data) return;
    if (f64) static_cast<double *>(data)[i] = double(v);
    else static_cast<float *>(data)[i] = v;
  }
};

template <bool kWarpPerRow, int kPer, bool kDirect>
__global__ void __launch_bounds__(kMaxRowThreads)
    layerNormRows(const float *__restrict__ x, const float *__restrict__ scale, const float *__restrict__ bias,
                  float *__restrict__ y, StatOut mean, StatOut invStd, int64_t rows, int64_t cols, float eps,
                  ParamIndex ps, ParamIndex pb) {
  __shared__ float scratch[32];
  const RowThreads<kWarpPerRow> t;
  if (t.row >= rows) return;
  const RowView<kPer> xv(x + t.row * cols, cols, t.tid, t.count);
  float *yr = y + t.row * cols;
  float sum = 0;
  xv.forEach([&](int, int64_t, float v) { sum += v; });
  sum = groupReduce<kWarpPerRow>(sum, AddOp(), 0.f, scratch);
  const float mu = cols ? sum / float(cols) : 0.f;
  float sq = 0;
  xv.forEach([&](int, int64_t, float v) { sq += (v - mu) * (v - mu); });
  sq = groupReduce<kWarpPerRow>(sq, AddOp(), 0.f, scratch);
  const float inv = 1.f / sqrtf((cols ? sq / float(cols) : 0.f) + eps);
  xv.forEach([&](int, int64_t i, float v) {
    float o = (v - mu) * inv * scale[paramOffset<kDirect>(ps, t.row, i, cols)];
    if (bias) o += bias[paramOffset<kDirect>(pb, t.row, i, cols)];
    yr[i] = o;
  });
  if (t.tid == 0) {
    mean.store(t.row, mu);
    invStd.store(t.row, inv);
  }
}

template <bool kWarpPerRow, int kPer, bool kDirect>
__global__ void __launch_bounds__(kMaxRowThreads)
    rmsNormRows(const float *__restrict__ x, const float *__restrict__ scale, float *__restrict__ y, int64_t rows,
                int64_t cols, float eps, ParamIndex ps) {
  __shared__ float scratch[32];
  const RowThreads<kWarpPerRow> t;
  if (t.row >= rows) return;
  const RowView<kPer> xv(x + t.row * cols, cols, t.tid, t.count);
  float *yr = y + t.row * cols;
  float sq = 0;
  xv.forEach([&](int, int64_t, float v) { sq += v * v; });
  sq = groupReduce<kWarpPerRow>(sq, AddOp(), 0.f, scratch);
  const float inv = 1.f / sqrtf((cols ? sq / float(cols) : 0.f) + eps);
  xv.forEach([&](int, int64_t i, float v) { yr[i] = v * inv * scale[paramOffset<kDirect>(ps, t.row, i, cols)]; });
}

// A block per chunk of rows. With xhat = (x - mean) * inv and g = dY * Scale:
//   dX = inv * (g - mean(g) - xhat * mean(g * xhat))   (RMS: no mean(g) term)
// kDirect (Scale indexed by column): dY * xhat is summed over the block's
// rows per column (in registers when the row is, else in the buffer's row)
// and left in buffer[blockIdx.x * cols + col]. Otherwise it is stored whole,
// buffer[row * cols + col], for a later reduction to Scale's shape.
template <int kPer, bool kDirect>
__global__ void __launch_bounds__(kMaxRowThreads)
    normGradRows(const float *__restrict__ dy, const float *__restrict__ x, const float *__restrict__ scale,
                 float *__restrict__ dx, float *__restrict__ buffer, int64_t rows, int64_t cols, int64_t rowsPerBlock,
                 float eps, ParamIndex ps, bool rms) {
  __shared__ float scratch[32];
  __shared__ SumPair pairScratch[32];
  const int tid = threadIdx.x, nth = blockDim.x;
  const int64_t r0 = int64_t(blockIdx.x) * rowsPerBlock, r1 = min(rows, r0 + rowsPerBlock);
  float *blockPartial = buffer + int64_t(blockIdx.x) * cols;
  float acc[kPer > 0 ? kPer : 1] = {};
  if (kDirect && kPer == 0)
    for (int64_t k = tid; k < cols; k += nth) blockPartial[k] = 0.f; // each thread owns the same columns throughout
  // dScale's part of element (row, k): dY * xhat.
  auto addScaleGrad = [&](int slot, int64_t row, int64_t k, float part) {
    if constexpr (!kDirect) buffer[row * cols + k] = part;
    else if constexpr (kPer > 0) acc[slot] += part;
    else blockPartial[k] += part;
  };
  for (int64_t row = r0; row < r1; ++row) {
    const RowView<kPer> xv(x + row * cols, cols, tid, nth), gv(dy + row * cols, cols, tid, nth);
    float *dxr = dx + row * cols;
    if (rms) {
      // One reduction for both sums: x.x and g.x (g.xhat = inv * g.x).
      SumPair s{0.f, 0.f};
      xv.forEachWith(gv, [&](int, int64_t k, float xk, float gk) {
        s.a += xk * xk;
        s.b += gk * scale[paramOffset<kDirect>(ps, row, k, cols)] * xk;
      });
      s = blockReduce(s, AddOp(), SumPair{0.f, 0.f}, pairScratch);
      const float inv = 1.f / sqrtf((cols ? s.a / float(cols) : 0.f) + eps);
      const float meanGX = cols ? inv * s.b / float(cols) : 0.f;
      xv.forEachWith(gv, [&](int slot, int64_t k, float xk, float gk) {
        const float xhat = xk * inv, g = gk * scale[paramOffset<kDirect>(ps, row, k, cols)];
        dxr[k] = inv * (g - xhat * meanGX);
        addScaleGrad(slot, row, k, gk * xhat);
      });
      continue;
    }
    float sum = 0;
    xv.forEach([&](int, int64_t, float v) { sum += v; });
    sum = blockReduce(sum, AddOp(), 0.f, scratch);
    const float mu = cols ? sum / float(cols) : 0.f;
    float sq = 0;
    xv.forEach([&](int, int64_t, float v) { sq += (v - mu) * (v - mu); });
    sq = blockReduce(sq, AddOp(), 0.f, scratch);
    const float inv = 1.f / sqrtf((cols ? sq / float(cols) : 0.f) + eps);
    SumPair sums{0.f, 0.f}; // g, g * xhat
    xv.forEachWith(gv, [&](int slot, int64_t k, float xk, float gk) {
      const float xhat = (xk - mu) * inv, g = gk * scale[paramOffset<kDirect>(ps, row, k, cols)];
      sums.a += g;
      sums.b += g * xhat;
      addScaleGrad(slot, row, k, gk * xhat);
    });
    sums = blockReduce(sums, AddOp(), SumPair{0.f, 0.f}, pairScratch);
    const float meanG = cols ? sums.a / float(cols) : 0.f, meanGX = cols ? sums.b / float(cols) : 0.f;
    xv.forEachWith(gv, [&](int, int64_t k, float xk, float gk) {
      const float xhat = (xk - mu) * inv, g = gk * scale[paramOffset<kDirect>(ps, row, k, cols)];
      dxr[k] = inv * (g - meanG - xhat * meanGX);
    });
  }
  if constexpr (kDirect && kPer > 0) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int k = tid + j * nth;
      if (k < cols) blockPartial[k] = acc[j];
    }
  }
}

llvm::Error requireF32(llvm::StringRef op, std::initializer_list<const DeviceTensor *> ts) {
  for (const DeviceTensor *t : ts)
    if (t && t->dtype != DType::F32)
      return gpuKernelError(op, llvm::Twine("unsupported element type ") + dtypeName(t->dtype) + " on the GPU");
  return llvm::Error::success();
}

llvm::Expected<StatOut> statOutput(llvm::StringRef op, const DeviceTensor *t, int64_t rows) {
  StatOut s;
  if (!t) return s;
  if (t->numel() != rows)
    return gpuKernelError(op, "Mean/InvStdDev output has " + llvm::Twine(t->numel()) + " elements, expected " +
                                  llvm::Twine(rows));
  if (t->dtype != DType::F32 && t->dtype != DType::F64)
    return gpuKernelError(op, llvm::Twine("Mean/InvStdDev of type ") + dtypeName(t->dtype) +
                                  " is not supported on the GPU");
  s.data = t->data;
  s.f64 = t->dtype == DType::F64;
  return s;
}

llvm::Error normForward(GpuKernelContext &ctx, bool layer) {
  const char *op = layer ? "LayerNormalization" : "RMSNormalization";
  const DeviceTensor *x = ctx.input(0), *scale = ctx.input(1), *bias = layer ? ctx.input(2) : nullptr;
  const DeviceTensor *y = ctx.output(0);
  if (!x || !scale) return gpuKernelError(op, "X and Scale are required");
  if (!y) return gpuKernelError(op, "output Y is missing");
  if (auto e = requireF32(op, {x, scale, bias, y})) return e;
  auto dims = cpu::normDims(x->shape, ctx.attrs.getInt("axis", -1));
  if (!dims) return gpuKernelError(op, llvm::toString(dims.takeError()));
  if (y->shape != x->shape)
    return gpuKernelError(op,
                          "output shape " + shapeToString(y->shape) + " differs from X's " + shapeToString(x->shape));
  auto ps = paramIndex(op, scale->shape, x->shape, dims->axis, "Scale");
  if (!ps) return ps.takeError();
  ParamIndex pb;
  if (bias) {
    auto b = paramIndex(op, bias->shape, x->shape, dims->axis, "B");
    if (!b) return b.takeError();
    pb = *b;
  }
  const int64_t rows = dims->rows, cols = dims->cols;
  StatOut mean, invStd;
  if (layer) {
    auto m = statOutput(op, ctx.output(1), rows);
    if (!m) return m.takeError();
    auto s = statOutput(op, ctx.output(2), rows);
    if (!s) return s.takeError();
    mean = *m;
    invStd = *s;
  }
  const float eps = ctx.attrs.getFloat("epsilon", 1e-5f);
  if (rows == 0) return llvm::Error::success();
  const RowLaunch l = rowLaunchFor(cols);
  const unsigned blocks = rowBlocks(rows, l);
  cudaStream_t stream = ctx.gpu.stream;
  const float *xp = x->as<float>(), *sp = scale->as<float>(), *bp = bias ? bias->as<float>() : nullptr;
  float *yp = y->as<float>();
  // Rows are held in registers only with direct parameters (fewer registers).
  const bool direct = ps->direct && pb.direct;
  if (!direct && (ps->rank == 0 || (bias && pb.rank == 0)))
    return gpuKernelError(op, "Scale or B broadcast within the rows needs X of rank <= 8");
  auto launch = [&](auto warp, auto per, auto isDirect) {
    constexpr bool kWarp = decltype(warp)::value, kDirect = decltype(isDirect)::value;
    constexpr int kPer = decltype(per)::value;
    if constexpr (kDirect || kPer == 0) {
      if (layer)
        layerNormRows<kWarp, kPer, kDirect>
            <<<blocks, l.threads, 0, stream>>>(xp, sp, bp, yp, mean, invStd, rows, cols, eps, *ps, pb);
      else rmsNormRows<kWarp, kPer, kDirect><<<blocks, l.threads, 0, stream>>>(xp, sp, yp, rows, cols, eps, *ps);
    }
  };
  withWarpPerRow(l.warpPerRow, [&](auto warp) {
    if (direct) withPerThread(l.perThread, [&](auto per) { launch(warp, per, std::true_type{}); });
    else launch(warp, std::integral_constant<int, 0>{}, std::false_type{});
  });
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

llvm::Error layerNormKernel(GpuKernelContext &ctx) { return normForward(ctx, true); }
llvm::Error rmsNormKernel(GpuKernelContext &ctx) { return normForward(ctx, false); }

// --- Gradients ---

constexpr int64_t kMaxGradBlocks = 1024;
constexpr size_t kAlign = 256;

size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// How the gradient kernel is laid out, and where its scratch goes.
struct NormGradPlan {
  int64_t rows = 0, cols = 0, axis = 0;
  int64_t blocks = 0, rowsPerBlock = 0;
  unsigned threads = 32;
  int perThread = 0; // row elements a thread holds in registers (0: streamed)
  ParamIndex ps;
  size_t bufferBytes = 0; // partial sums [blocks, cols] (direct) or dY * xhat [rows, cols]
  size_t reduceBytes = 0; // the reduction's own scratch, after the buffer
};

llvm::Expected<NormGradPlan> planNormGrad(llvm::StringRef op, const GpuKernelContext &ctx) {
  const DeviceTensor *dy = ctx.input(0), *x = ctx.input(1), *scale = ctx.input(2);
  if (!dy || !x || !scale) return gpuKernelError(op, "dY, X and Scale are required");
  auto dims = cpu::normDims(x->shape, ctx.attrs.getInt("axis", -1));
  if (!dims) return gpuKernelError(op, llvm::toString(dims.takeError()));
  auto ps = paramIndex(op, scale->shape, x->shape, dims->axis, "Scale");
  if (!ps) return ps.takeError();
  NormGradPlan p;
  p.rows = dims->rows;
  p.cols = dims->cols;
  p.axis = dims->axis;
  p.ps = *ps;
  if (p.rows == 0 || p.cols == 0) return p;
  p.blocks = std::min(p.rows, kMaxGradBlocks);
  p.rowsPerBlock = (p.rows + p.blocks - 1) / p.blocks;
  p.blocks = (p.rows + p.rowsPerBlock - 1) / p.rowsPerBlock;
  p.threads = rowThreadsFor(p.cols);
  p.perThread = p.ps.direct ? perThreadFor(p.cols, p.threads) : 0;
  if (p.ps.direct) {
    p.bufferBytes = alignUp(size_t(p.blocks * p.cols) * sizeof(float));
    p.reduceBytes = sumToShapeWorkspaceBytes({p.blocks, p.cols}, {p.cols});
  } else {
    p.bufferBytes = alignUp(size_t(p.rows * p.cols) * sizeof(float));
    p.reduceBytes = sumToShapeWorkspaceBytes(x->shape, scale->shape);
  }
  return p;
}

size_t normGradWorkspace(const GpuKernelContext &ctx, llvm::StringRef op) {
  auto p = planNormGrad(op, ctx);
  if (!p) {
    llvm::consumeError(p.takeError());
    return 0;
  }
  return p->bufferBytes + p->reduceBytes;
}

size_t layerNormGradWorkspace(const GpuKernelContext &ctx) {
  return normGradWorkspace(ctx, "megac.LayerNormalizationGrad");
}
size_t rmsNormGradWorkspace(const GpuKernelContext &ctx) {
  return normGradWorkspace(ctx, "megac.RMSNormalizationGrad");
}

llvm::Error normGrad(GpuKernelContext &ctx, bool rms) {
  const char *op = rms ? "megac.RMSNormalizationGrad" : "megac.LayerNormalizationGrad";
  auto plan = planNormGrad(op, ctx);
  if (!plan) return plan.takeError();
  const NormGradPlan &p = *plan;
  const DeviceTensor &dy = *ctx.input(0), &x = *ctx.input(1), &scale = *ctx.input(2);
  const DeviceTensor *dx = ctx.output(0), *dScale = ctx.output(1);
  if (!dx || !dScale) return gpuKernelError(op, "dX and dScale outputs are required");
  if (auto e = requireF32(op, {&dy, &x, &scale, dx, dScale})) return e;
  if (dy.shape != x.shape)
    return gpuKernelError(op, "dY has shape " + shapeToString(dy.shape) + ", expected " + shapeToString(x.shape));
  if (dx->shape != x.shape)
    return gpuKernelError(op, "dX has shape " + shapeToString(dx->shape) + ", expected " + shapeToString(x.shape));
  if (dScale->shape != scale.shape)
    return gpuKernelError(op, "dScale has shape " + shapeToString(dScale->shape) + ", expected " +
                                  shapeToString(scale.shape));
  cudaStream_t stream = ctx.gpu.stream;
  if (p.rows == 0 || p.cols == 0) {
    if (dScale->nbytes()) MEGAC_CUDA_TRY(cudaMemsetAsync(dScale->data, 0, dScale->nbytes(), stream));
    return llvm::Error::success();
  }
  if (!ctx.workspace || ctx.workspaceBytes < p.bufferBytes + p.reduceBytes)
    return gpuKernelError(op, "workspace is smaller than the gradient needs");
  float *buffer = static_cast<float *>(ctx.workspace);
  void *reduceWs = static_cast<char *>(ctx.workspace) + p.bufferBytes;
  const float eps = ctx.attrs.getFloat("epsilon", 1e-5f);
  auto launch = [&](auto per, auto isDirect) {
    constexpr int kPer = decltype(per)::value;
    constexpr bool kDirect = decltype(isDirect)::value;
    if constexpr (kDirect || kPer == 0)
      normGradRows<kPer, kDirect><<<unsigned(p.blocks), p.threads, 0, stream>>>(
          dy.as<float>(), x.as<float>(), scale.as<float>(), dx->as<float>(), buffer, p.rows, p.cols, p.rowsPerBlock,
          eps, p.ps, rms);
  };
  if (p.ps.direct) withPerThread(p.perThread, [&](auto per) { launch(per, std::true_type{}); });
  else launch(std::integral_constant<int, 0>{}, std::false_type{});
  MEGAC_CUDA_LAUNCHED();
  if (p.ps.direct)
    return sumToShapeF32(op, buffer, {p.blocks, p.cols}, dScale->as<float>(), {p.cols}, reduceWs, p.reduceBytes,
                         stream);
  return sumToShapeF32(op, buffer, x.shape, dScale->as<float>(), scale.shape, reduceWs, p.reduceBytes, stream);
}

llvm::Error layerNormGradKernel(GpuKernelContext &ctx) { return normGrad(ctx, false); }
llvm::Error rmsNormGradKernel(GpuKernelContext &ctx) { return normGrad(ctx, true); }

} // namespace

void registerNormGpuKernels() {
  registerGpuKernel("LayerNormalization", layerNormKernel);
  registerGpuKernel("RMSNormalization", rmsNormKernel);
  registerGpuKernel("megac.LayerNormalizationGrad", layerNormGradKernel, layerNormGradWorkspace);
  registerGpuKernel("megac.RMSNormalizationGrad", rmsNormGradKernel, rmsNormGradWorkspace);
}

} // namespace megac::cuda
