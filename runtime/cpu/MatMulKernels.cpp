// MatMul (numpy matmul: 1-D promotion, batch broadcasting) and Gemm.
// f32 runs on the blocked sgemm; f16/bf16 are computed in f32; f64 and the
// integer types use a plain loop (integers wrap around like numpy's).
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/HalfFloat.h"
#include "runtime/cpu/Kernel.h"

#include <algorithm>
#include <type_traits>

namespace megac::cpu {

namespace {

// Element offsets of each matrix of an operand whose batch dims `in`
// broadcast to `out` (both without the two matrix dims).
std::vector<int64_t> batchOffsets(const Shape &out, const Shape &in, int64_t matrixSize) {
  size_t r = out.size();
  std::vector<int64_t> inStride(r, 0);
  int64_t s = matrixSize;
  for (size_t k = 0; k < in.size(); ++k) {
    size_t d = in.size() - 1 - k, od = r - 1 - k;
    inStride[od] = in[d] == 1 ? 0 : s;
    s *= in[d];
  }
  int64_t count = numElements(out);
  std::vector<int64_t> offsets(size_t(count), 0);
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  for (int64_t b = 0; b < count; ++b) {
    offsets[size_t(b)] = off;
    for (size_t d = r; d-- > 0;) {
      off += inStride[d];
      if (++idx[d] < out[d]) break;
      off -= inStride[d] * out[d];
      idx[d] = 0;
    }
  }
  return offsets;
}

struct MatMulPlan {
  int64_t M = 0, N = 0, K = 0;
  std::vector<int64_t> aOffsets, bOffsets; // one per output matrix
  bool bShared = false; // every product uses the same B matrix
};

llvm::Expected<MatMulPlan> planMatMul(const Tensor &a, const Tensor &b, const Tensor &y) {
  if (a.rank() < 1 || b.rank() < 1) return kernelError("MatMul", "inputs must have rank >= 1");
  MatMulPlan p;
  p.M = a.rank() == 1 ? 1 : a.dim(-2);
  p.K = a.dim(-1);
  int64_t kb = b.rank() == 1 ? b.dim(0) : b.dim(-2);
  p.N = b.rank() == 1 ? 1 : b.dim(-1);
  if (kb != p.K)
    return kernelError("MatMul", "inner dimensions differ: " + shapeToString(a.shape()) + " x " +
                                     shapeToString(b.shape()));
  Shape aBatch(a.shape().begin(), a.shape().end() - std::min<int64_t>(a.rank(), 2));
  Shape bBatch(b.shape().begin(), b.shape().end() - std::min<int64_t>(b.rank(), 2));
  size_t r = std::max(aBatch.size(), bBatch.size());
  Shape batch(r, 1);
  for (size_t k = 0; k < r; ++k) {
    int64_t da = k < aBatch.size() ? aBatch[aBatch.size() - 1 - k] : 1;
    int64_t db = k < bBatch.size() ? bBatch[bBatch.size() - 1 - k] : 1;
    if (da != db && da != 1 && db != 1)
      return kernelError("MatMul", "batch dimensions do not broadcast: " + shapeToString(a.shape()) + " x " +
                                       shapeToString(b.shape()));
    batch[r - 1 - k] = da == 1 ? db : da;
  }
  if (numElements(batch) * p.M * p.N != y.numel())
    return kernelError("MatMul", "output " + shapeToString(y.shape()) + " does not match the inputs");
  p.aOffsets = batchOffsets(batch, aBatch, p.M * p.K);
  p.bOffsets = batchOffsets(batch, bBatch, p.K * p.N);
  p.bShared = numElements(bBatch) == 1;
  return p;
}

void matMulF32(const MatMulPlan &p, const float *a, const float *b, float *y) {
  int64_t batches = int64_t(p.aOffsets.size());
  if (batches == 0 || p.M == 0 || p.N == 0) return;
  // One B for all products, and A's matrices are stacked rows: one tall product.
  bool aStacked = true;
  for (int64_t i = 0; i < batches && aStacked; ++i) aStacked = p.aOffsets[size_t(i)] == i * p.M * p.K;
  if (p.bShared && aStacked) {
    sgemm(false, false, batches * p.M, p.N, p.K, 1.0f, a, p.K, b, p.N, 0.0f, y, p.N);
    return;
  }
  double flopsEach = 2.0 * double(p.M) * double(p.N) * double(p.K);
  bool manySmall = batches >= 2 * numThreads() || flopsEach < 1.0e7;
  if (!manySmall) {
    for (int64_t i = 0; i < batches; ++i)
      sgemm(false, false, p.M, p.N, p.K, 1.0f, a + p.aOffsets[size_t(i)], p.K, b + p.bOffsets[size_t(i)], p.N, 0.0f,
            y + i * p.M * p.N, p.N);
    return;
  }
  parallelFor(batches, int64_t(std::min(flopsEach, 1.0e12)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      sgemmSerial(false, false, p.M, p.N, p.K, 1.0f, a + p.aOffsets[size_t(i)], p.K, b + p.bOffsets[size_t(i)], p.N,
                  0.0f, y + i * p.M * p.N, p.N);
  });
}

// Accumulator for the plain loops: double for f64, wrapping unsigned for integers.
template <class T> using LoopAcc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;

template <class T> void matMulLoop(const MatMulPlan &p, const T *a, const T *b, T *y) {
  using Acc = LoopAcc<T>;
  int64_t rows = int64_t(p.aOffsets.size()) * p.M;
  parallelFor(rows, p.N * p.K, [&](int64_t begin, int64_t end) {
    std::vector<Acc> acc(size_t(p.N));
    for (int64_t row = begin; row < end; ++row) {
      int64_t bi = row / p.M, i = row % p.M;
      const T *ai = a + p.aOffsets[size_t(bi)] + i * p.K;
      const T *bm = b + p.bOffsets[size_t(bi)];
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t k = 0; k < p.K; ++k) {
        Acc aik = Acc(ai[k]);
        const T *bk = bm + k * p.N;
        for (int64_t j = 0; j < p.N; ++j) acc[size_t(j)] += aik * Acc(bk[j]);
      }
      T *yi = y + row * p.N;
      for (int64_t j = 0; j < p.N; ++j) yi[j] = T(acc[size_t(j)]);
    }
  });
}

llvm::Error matMulKernel(KernelContext &ctx) {
  const Tensor *a = ctx.input(0), *b = ctx.input(1);
  if (!a || !b) return kernelError("MatMul", "needs two inputs");
  if (a->dtype() != b->dtype()) return kernelError("MatMul", "inputs have different element types");
  Tensor &y = ctx.output(0);
  auto plan = planMatMul(*a, *b, y);
  if (!plan) return plan.takeError();
  switch (a->dtype()) {
  case DType::F32: matMulF32(*plan, a->data<float>(), b->data<float>(), y.data<float>()); break;
  case DType::F16:
  case DType::BF16: {
    Tensor wa = widenToF32(*a), wb = widenToF32(*b), wy(DType::F32, y.shape());
    matMulF32(*plan, wa.data<float>(), wb.data<float>(), wy.data<float>());
    narrowFromF32(wy, y);
    break;
  }
  case DType::F64: matMulLoop(*plan, a->data<double>(), b->data<double>(), y.data<double>()); break;
  case DType::I32: matMulLoop(*plan, a->data<int32_t>(), b->data<int32_t>(), y.data<int32_t>()); break;
  case DType::I64: matMulLoop(*plan, a->data<int64_t>(), b->data<int64_t>(), y.data<int64_t>()); break;
  case DType::U32: matMulLoop(*plan, a->data<uint32_t>(), b->data<uint32_t>(), y.data<uint32_t>()); break;
  case DType::U64: matMulLoop(*plan, a->data<uint64_t>(), b->data<uint64_t>(), y.data<uint64_t>()); break;
  default: return kernelError("MatMul", llvm::Twine("unsupported element type ") + dtypeName(a->dtype()));
  }
  return llvm::Error::success();
}

// --- Gemm: Y = alpha * op(A) * op(B) + beta * C ---

struct GemmDims {
  int64_t M, N, K;
  bool transA, transB;
  int64_t cRows = 0, cCols = 0; // C's extent (1 where it broadcasts); 0 without C
};

llvm::Expected<GemmDims> gemmDims(KernelContext &ctx) {
  const Tensor *a = ctx.input(0), *b = ctx.input(1), *c = ctx.input(2);
  if (!a || !b) return kernelError("Gemm", "needs inputs A and B");
  if (a->rank() != 2 || b->rank() != 2) return kernelError("Gemm", "A and B must be 2-D");
  GemmDims d;
  d.transA = ctx.attrs.getInt("transA", 0) != 0;
  d.transB = ctx.attrs.getInt("transB", 0) != 0;
  d.M = d.transA ? a->dim(1) : a->dim(0);
  d.K = d.transA ? a->dim(0) : a->dim(1);
  int64_t kb = d.transB ? b->dim(1) : b->dim(0);
  d.N = d.transB ? b->dim(0) : b->dim(1);
  if (kb != d.K)
    return kernelError("Gemm", "inner dimensions differ: " + shapeToString(a->shape()) + " x " +
                                   shapeToString(b->shape()));
  const Tensor &y = ctx.output(0);
  if (y.rank() != 2 || y.dim(0) != d.M || y.dim(1) != d.N)
    return kernelError("Gemm", "output " + shapeToString(y.shape()) + " does not match the inputs");
  if (c) {
    if (c->rank() > 2) return kernelError("Gemm", "C must have rank <= 2");
    if (c->dtype() != a->dtype()) return kernelError("Gemm", "C has a different element type");
    d.cRows = c->rank() == 2 ? c->dim(0) : 1;
    d.cCols = c->rank() >= 1 ? c->dim(-1) : 1;
    if ((d.cRows != 1 && d.cRows != d.M) || (d.cCols != 1 && d.cCols != d.N))
      return kernelError("Gemm", "C " + shapeToString(c->shape()) + " does not broadcast to [" + llvm::Twine(d.M) +
                                     "," + llvm::Twine(d.N) + "]");
  }
  return d;
}

// y[i, j] = c[i or 0, j or 0]
template <class T> void broadcastC(const GemmDims &d, const T *c, T *y) {
  for (int64_t i = 0; i < d.M; ++i) {
    const T *ci = c + (d.cRows == 1 ? 0 : i * d.cCols);
    T *yi = y + i * d.N;
    if (d.cCols == 1) std::fill(yi, yi + d.N, ci[0]);
    else std::copy(ci, ci + d.N, yi);
  }
}

void gemmF32(const GemmDims &d, float alpha, float beta, const float *a, const float *b, const float *c, float *y) {
  bool useC = c && beta != 0.0f;
  if (useC) broadcastC(d, c, y);
  sgemm(d.transA, d.transB, d.M, d.N, d.K, alpha, a, d.transA ? d.M : d.K, b, d.transB ? d.K : d.N,
        useC ? beta : 0.0f, y, d.N);
}

template <class T>
void gemmLoop(const GemmDims &d, double alpha, double beta, const T *a, const T *b, const T *c, T *y) {
  using Acc = LoopAcc<T>;
  parallelFor(d.M, d.N * d.K, [&](int64_t begin, int64_t end) {
    std::vector<Acc> acc(size_t(d.N));
    for (int64_t i = begin; i < end; ++i) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t k = 0; k < d.K; ++k) {
        Acc aik = Acc(d.transA ? a[k * d.M + i] : a[i * d.K + k]);
        for (int64_t j = 0; j < d.N; ++j) acc[size_t(j)] += aik * Acc(d.transB ? b[j * d.K + k] : b[k * d.N + j]);
      }
      for (int64_t j = 0; j < d.N; ++j) {
        double sum;
        if constexpr (std::is_floating_point_v<T>) sum = acc[size_t(j)];
        else if constexpr (std::is_signed_v<T>) sum = double(int64_t(acc[size_t(j)]));
        else sum = double(acc[size_t(j)]);
        double v = alpha * sum;
        if (c) v += beta * double(c[(d.cRows == 1 ? 0 : i * d.cCols) + (d.cCols == 1 ? 0 : j)]);
        y[i * d.N + j] = T(v);
      }
    }
  });
}

llvm::Error gemmKernel(KernelContext &ctx) {
  auto d = gemmDims(ctx);
  if (!d) return d.takeError();
  const Tensor *a = ctx.input(0), *b = ctx.input(1), *c = ctx.input(2);
  if (a->dtype() != b->dtype()) return kernelError("Gemm", "A and B have different element types");
  float alpha = ctx.attrs.getFloat("alpha", 1.0f), beta = ctx.attrs.getFloat("beta", 1.0f);
  Tensor &y = ctx.output(0);
  switch (a->dtype()) {
  case DType::F32:
    gemmF32(*d, alpha, beta, a->data<float>(), b->data<float>(), c ? c->data<float>() : nullptr, y.data<float>());
    break;
  case DType::F16:
  case DType::BF16: {
    Tensor wa = widenToF32(*a), wb = widenToF32(*b), wy(DType::F32, y.shape());
    Tensor wc = c ? widenToF32(*c) : Tensor();
    gemmF32(*d, alpha, beta, wa.data<float>(), wb.data<float>(), c ? wc.data<float>() : nullptr, wy.data<float>());
    narrowFromF32(wy, y);
    break;
  }
#define MEGAC_GEMM_LOOP(DT, T)                                                                                         \
  case DType::DT:                                                                                                      \
    gemmLoop<T>(*d, alpha, beta, a->data<T>(), b->data<T>(), c ? c->data<T>() : nullptr, y.data<T>());                 \
    break;
    MEGAC_GEMM_LOOP(F64, double)
    MEGAC_GEMM_LOOP(I32, int32_t)
    MEGAC_GEMM_LOOP(I64, int64_t)
    MEGAC_GEMM_LOOP(U32, uint32_t)
    MEGAC_GEMM_LOOP(U64, uint64_t)
#undef MEGAC_GEMM_LOOP
  default: return kernelError("Gemm", llvm::Twine("unsupported element type ") + dtypeName(a->dtype()));
  }
  return llvm::Error::success();
}

} // namespace

void registerMatMulKernels() {
  registerKernel("MatMul", matMulKernel);
  registerKernel("Gemm", gemmKernel);
}

} // namespace megac::cpu
