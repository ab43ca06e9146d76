// Kernels that compute values rather than move them: Shape, Size, Range,
// ConstantOfShape, CumSum, Trilu.
#include "runtime/cpu/ShapeKernelsInternal.h"
#include "runtime/cpu/ShapeSemantics.h"

#include <algorithm>
#include <cstring>

namespace megac::cpu {

namespace {

// Shape and Size are folded by type inference; the kernels exist for
// evaluators that run ops without inferring first.
llvm::Error shapeKernel(KernelContext &ctx) {
  if (auto e = requireInputs("Shape", ctx, 1)) return e;
  const Shape &s = ctx.input(0)->shape();
  int64_t rank = int64_t(s.size());
  auto clampIndex = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  int64_t start = clampIndex(ctx.attrs.getInt("start", 0));
  int64_t end = ctx.attrs.has("end") ? clampIndex(ctx.attrs.getInt("end", rank)) : rank;
  Tensor &out = ctx.output(0);
  if (out.dtype() != DType::I64 || out.rank() != 1 || out.numel() != std::max<int64_t>(end - start, 0))
    return kernelError("Shape", "output must be i64[" + llvm::Twine(std::max<int64_t>(end - start, 0)) + "]");
  for (int64_t d = start; d < end; ++d) out.data<int64_t>()[d - start] = s[size_t(d)];
  return llvm::Error::success();
}

llvm::Error sizeKernel(KernelContext &ctx) {
  if (auto e = requireInputs("Size", ctx, 1)) return e;
  Tensor &out = ctx.output(0);
  if (out.dtype() != DType::I64 || out.numel() != 1) return kernelError("Size", "output must be an i64 scalar");
  out.data<int64_t>()[0] = ctx.input(0)->numel();
  return llvm::Error::success();
}

llvm::Error rangeKernel(KernelContext &ctx) {
  if (auto e = requireInputs("Range", ctx, 3)) return e;
  const Tensor &start = *ctx.input(0), &limit = *ctx.input(1), &delta = *ctx.input(2);
  Tensor &out = ctx.output(0);
  auto n = rangeCount(start, limit, delta);
  if (!n) return kernelError("Range", llvm::toString(n.takeError()));
  if (out.rank() != 1 || out.numel() != *n || out.dtype() != start.dtype())
    return kernelError("Range",
                       "output must be " + llvm::Twine(dtypeName(start.dtype())) + "[" + llvm::Twine(*n) + "]");
  // Element i is start + i * delta (numpy's arange), exact for integers.
  if (isFloatType(out.dtype())) {
    double s = start.getAsDouble(0), d = delta.getAsDouble(0);
    for (int64_t i = 0; i < *n; ++i) out.setFromDouble(i, s + double(i) * d);
  } else if (out.dtype() == DType::I64) {
    int64_t s = start.getAsInt(0), d = delta.getAsInt(0);
    for (int64_t i = 0; i < *n; ++i) out.data<int64_t>()[i] = s + i * d;
  } else {
    int64_t s = start.getAsInt(0), d = delta.getAsInt(0);
    for (int64_t i = 0; i < *n; ++i) out.setFromDouble(i, double(s + i * d));
  }
  return llvm::Error::success();
}

llvm::Error constantOfShapeKernel(KernelContext &ctx) {
  if (auto e = requireInputs("ConstantOfShape", ctx, 0)) return e;
  Tensor &out = ctx.output(0);
  Tensor value;
  if (const Attr *a = ctx.attrs.get("value"); a && a->kind == Attr::Kind::Tensor) value = a->t;
  else value = Tensor::scalar(0.0f);
  if (value.numel() != 1 || value.dtype() != out.dtype())
    return kernelError("ConstantOfShape", "value must be one element of the output's dtype");
  size_t es = dtypeSize(out.dtype());
  uint8_t *dst = static_cast<uint8_t *>(out.raw());
  for (int64_t i = 0; i < out.numel(); ++i) copyElement(dst + i * int64_t(es), value.raw(), es);
  return llvm::Error::success();
}

template <class A>
void cumsumTyped(const void *xv, void *yv, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse) {
  using S = typename A::Storage;
  const S *x = static_cast<const S *>(xv);
  S *y = static_cast<S *>(yv);
  for (int64_t o = 0; o < outer; ++o) {
    const S *xb = x + o * n * inner;
    S *yb = y + o * n * inner;
    for (int64_t t = 0; t < n; ++t) {
      int64_t j = reverse ? n - 1 - t : t, prev = reverse ? j + 1 : j - 1;
      S *yr = yb + j * inner;
      const S *xr = xb + (exclusive ? prev : j) * inner;
      if (t == 0) {
        for (int64_t i = 0; i < inner; ++i) yr[i] = exclusive ? A::store(0) : xr[i];
        continue;
      }
      const S *yp = yb + prev * inner;
      for (int64_t i = 0; i < inner; ++i) yr[i] = A::store(A::load(yp[i]) + A::load(xr[i]));
    }
  }
}

llvm::Error cumSumKernel(KernelContext &ctx) {
  if (auto e = requireInputs("CumSum", ctx, 2)) return e;
  const Tensor &x = *ctx.input(0);
  Tensor &out = ctx.output(0);
  const Tensor *axisT = ctx.input(1);
  if (!axisT || axisT->numel() != 1 || !isIntegerType(axisT->dtype()))
    return kernelError("CumSum", "axis must be an integer scalar");
  auto axis = normalizeAxisIn(axisT->getAsInt(0), x.rank());
  if (!axis) return kernelError("CumSum", llvm::toString(axis.takeError()));
  if (out.shape() != x.shape() || out.dtype() != x.dtype()) return kernelError("CumSum", "output must have x's type");
  bool exclusive = ctx.attrs.getInt("exclusive", 0) != 0, reverse = ctx.attrs.getInt("reverse", 0) != 0;
  int64_t outer = dimsProduct(x.shape(), 0, *axis), n = x.dim(*axis);
  int64_t inner = dimsProduct(x.shape(), *axis + 1, x.rank());
  if (x.dtype() == DType::Bool) return kernelError("CumSum", "bool is not supported");
  bool ok = dispatchArith(x.dtype(), [&](auto tag) {
    cumsumTyped<decltype(tag)>(x.raw(), out.raw(), outer, n, inner, exclusive, reverse);
  });
  if (!ok) return kernelError("CumSum", "unsupported dtype " + llvm::Twine(dtypeName(x.dtype())));
  return llvm::Error::success();
}

// Keeps the upper (j - i >= k) or lower (j - i <= k) triangle of each matrix.
llvm::Error triluKernel(KernelContext &ctx) {
  if (auto e = requireInputs("Trilu", ctx, 1)) return e;
  const Tensor &x = *ctx.input(0);
  Tensor &out = ctx.output(0);
  if (x.rank() < 2) return kernelError("Trilu", "input must have rank >= 2");
  if (out.shape() != x.shape() || out.dtype() != x.dtype())
    return kernelError("Trilu", "output must have the input's type");
  int64_t k = 0;
  if (const Tensor *kt = ctx.input(1)) {
    if (kt->numel() != 1) return kernelError("Trilu", "k must be a scalar");
    k = kt->getAsInt(0);
  }
  bool upper = ctx.attrs.getInt("upper", 1) != 0;
  std::memcpy(out.raw(), x.raw(), x.nbytes());
  int64_t rows = x.dim(-2), cols = x.dim(-1);
  int64_t mats = x.numel() / std::max<int64_t>(rows * cols, 1);
  size_t es = dtypeSize(x.dtype());
  uint8_t *dst = static_cast<uint8_t *>(out.raw());
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i) {
      uint8_t *row = dst + (m * rows + i) * cols * int64_t(es);
      // Zero columns [b, e); clamping keeps huge k from overflowing.
      int64_t diag = std::clamp<int64_t>(k, -cols - rows, cols + rows) + i;
      int64_t b = upper ? 0 : std::clamp<int64_t>(diag + 1, 0, cols);
      int64_t e = upper ? std::clamp<int64_t>(diag, 0, cols) : cols;
      if (e > b) std::memset(row + b * int64_t(es), 0, size_t(e - b) * es);
    }
  return llvm::Error::success();
}

} // namespace

void registerGeneratorKernels() {
  registerKernel("Shape", shapeKernel);
  registerKernel("Size", sizeKernel);
  registerKernel("Range", rangeKernel);
  registerKernel("ConstantOfShape", constantOfShapeKernel);
  registerKernel("CumSum", cumSumKernel);
  registerKernel("Trilu", triluKernel);
}

} // namespace megac::cpu
