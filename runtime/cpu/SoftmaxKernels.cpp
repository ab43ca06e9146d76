// Softmax and LogSoftmax along one axis (opset >= 13 semantics; the importer
// rewrites older opsets' flatten-to-2-D form). Numerically stable: the max
// is subtracted first and sums accumulate in double. A slice whose values are
// all -inf gives NaN, as in the ONNX reference and PyTorch.
#include "runtime/cpu/HalfFloat.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/VecMath.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace megac::cpu {

namespace {

// The input viewed as [outer, n, inner] with the softmax over n.
struct SoftmaxShape {
  int64_t outer = 1, n = 1, inner = 1;
};

template <class T, bool Log> void softmaxContiguousRow(const T *x, T *y, int64_t n) {
  T m;
  double sum;
  if constexpr (std::is_same_v<T, float>) { // the hot case: vectorized max and exp
    m = rowMax(x, n);
    sum = expShiftedSum(x, m, Log ? nullptr : y, n);
  } else {
    m = -std::numeric_limits<T>::infinity();
    for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
    sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      T e = std::exp(x[i] - m);
      if (!Log) y[i] = e;
      sum += double(e);
    }
  }
  if (Log) {
    T logSum = T(std::log(sum));
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - logSum;
  } else {
    T inv = T(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

// One [n, inner] block: softmax over n for each of the `inner` columns.
template <class T, bool Log>
void softmaxStridedBlock(const T *x, T *y, int64_t n, int64_t inner, std::vector<T> &maxes, std::vector<double> &sums) {
  maxes.assign(size_t(inner), -std::numeric_limits<T>::infinity());
  sums.assign(size_t(inner), 0.0);
  for (int64_t k = 0; k < n; ++k) {
    const T *xk = x + k * inner;
    for (int64_t j = 0; j < inner; ++j) maxes[size_t(j)] = xk[j] > maxes[size_t(j)] ? xk[j] : maxes[size_t(j)];
  }
  for (int64_t k = 0; k < n; ++k) {
    const T *xk = x + k * inner;
    T *yk = y + k * inner;
    for (int64_t j = 0; j < inner; ++j) {
      T e = std::exp(xk[j] - maxes[size_t(j)]);
      if (!Log) yk[j] = e;
      sums[size_t(j)] += double(e);
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    const T *xk = x + k * inner;
    T *yk = y + k * inner;
    for (int64_t j = 0; j < inner; ++j) {
      if (Log) yk[j] = (xk[j] - maxes[size_t(j)]) - T(std::log(sums[size_t(j)]));
      else yk[j] = yk[j] * T(1.0 / sums[size_t(j)]);
    }
  }
}

template <class T, bool Log> void softmax(const T *x, T *y, const SoftmaxShape &s) {
  if (s.inner == 1) {
    parallelFor(s.outer, s.n * 8, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) softmaxContiguousRow<T, Log>(x + r * s.n, y + r * s.n, s.n);
    });
    return;
  }
  parallelFor(s.outer, s.n * s.inner * 8, [&](int64_t begin, int64_t end) {
    std::vector<T> maxes;
    std::vector<double> sums;
    for (int64_t o = begin; o < end; ++o) {
      int64_t off = o * s.n * s.inner;
      softmaxStridedBlock<T, Log>(x + off, y + off, s.n, s.inner, maxes, sums);
    }
  });
}

template <bool Log> llvm::Error softmaxKernel(KernelContext &ctx) {
  const char *opName = Log ? "LogSoftmax" : "Softmax";
  const Tensor *x = ctx.input(0);
  if (!x) return kernelError(opName, "needs an input");
  Tensor &y = ctx.output(0);
  if (y.shape() != x->shape() || y.dtype() != x->dtype())
    return kernelError(opName, "output type does not match the input");
  int64_t rank = x->rank(), axis = ctx.attrs.getInt("axis", -1);
  if (axis < -std::max<int64_t>(rank, 1) || axis >= std::max<int64_t>(rank, 1))
    return kernelError(opName, "axis " + llvm::Twine(axis) + " is out of range for rank " + llvm::Twine(rank));
  if (axis < 0) axis += rank;
  SoftmaxShape s;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) s.outer *= x->dim(d);
    else if (d == axis) s.n = x->dim(d);
    else s.inner *= x->dim(d);
  }
  if (x->numel() == 0) return llvm::Error::success();
  switch (x->dtype()) {
  case DType::F32: softmax<float, Log>(x->data<float>(), y.data<float>(), s); break;
  case DType::F64: softmax<double, Log>(x->data<double>(), y.data<double>(), s); break;
  case DType::F16:
  case DType::BF16: {
    Tensor wx = widenToF32(*x), wy(DType::F32, y.shape());
    softmax<float, Log>(wx.data<float>(), wy.data<float>(), s);
    narrowFromF32(wy, y);
    break;
  }
  default: return kernelError(opName, llvm::Twine("unsupported element type ") + dtypeName(x->dtype()));
  }
  return llvm::Error::success();
}

} // namespace

void registerSoftmaxKernels() {
  registerKernel("Softmax", softmaxKernel<false>);
  registerKernel("LogSoftmax", softmaxKernel<true>);
}

} // namespace megac::cpu
