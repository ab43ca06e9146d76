// CPU kernels of the gradient helper ops declared in ir/ops/BasicGradOps.cpp.
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/ShapeSemantics.h"

#include <cmath>
#include <cstring>

namespace megac::cpu {

namespace {

// d/dx [x * Phi(x)] = Phi(x) + x * phi(x).
template <class T> T geluGradExact(T dy, T x) {
  double xd = double(x);
  double cdf = 0.5 * (1 + std::erf(xd * M_SQRT1_2));
  double pdf = std::exp(-0.5 * xd * xd) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
  return T(double(dy) * (cdf + xd * pdf));
}

// y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
template <class T> T geluGradTanh(T dy, T x) {
  const double k = M_2_SQRTPI * M_SQRT1_2, a = 0.044715;
  double xd = double(x);
  double t = std::tanh(k * (xd + a * xd * xd * xd));
  double du = k * (1 + 3 * a * xd * xd);
  return T(double(dy) * (0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * du));
}

template <class T> llvm::Error geluGradTyped(KernelContext &c, bool tanhApprox) {
  const T *dy = c.input(0)->data<T>(), *x = c.input(1)->data<T>();
  T *dx = c.output(0).data<T>();
  parallelFor(c.output(0).numel(), 40, [&](int64_t b, int64_t e) {
    if (tanhApprox)
      for (int64_t i = b; i < e; ++i) dx[i] = geluGradTanh(dy[i], x[i]);
    else
      for (int64_t i = b; i < e; ++i) dx[i] = geluGradExact(dy[i], x[i]);
  });
  return llvm::Error::success();
}

llvm::Error geluGradKernel(KernelContext &c) {
  const Tensor *dy = c.input(0), *x = c.input(1);
  if (!dy || !x) return kernelError("megac.GeluGrad", "expects (dY, X)");
  if (dy->shape() != x->shape() || dy->dtype() != x->dtype() || c.output(0).shape() != x->shape())
    return kernelError("megac.GeluGrad", "dY " + shapeToString(dy->shape()) + " and X " +
                                             shapeToString(x->shape()) + " differ");
  std::string approx = c.attrs.getString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return kernelError("megac.GeluGrad", "approximate must be \"none\" or \"tanh\", got \"" + approx + "\"");
  bool tanhApprox = approx == "tanh";
  switch (x->dtype()) {
  case DType::F32: return geluGradTyped<float>(c, tanhApprox);
  case DType::F64: return geluGradTyped<double>(c, tanhApprox);
  default: return kernelError("megac.GeluGrad", llvm::Twine("unsupported element type ") + dtypeName(x->dtype()));
  }
}

std::vector<int64_t> optionalInts(const KernelContext &c, size_t i) {
  const Tensor *t = c.input(i);
  return t ? t->toInt64Vector() : std::vector<int64_t>{};
}

// Copies dy (dense, in slice order) to its positions in `out`; E is an
// unsigned integer as wide as the element.
template <class E>
void scatterSlice(const E *src, E *dst, const std::vector<SliceDim> &dims, const std::vector<int64_t> &strides) {
  size_t rank = dims.size();
  if (rank == 0) {
    dst[0] = src[0];
    return;
  }
  int64_t base = 0;
  std::vector<int64_t> step(rank);
  for (size_t d = 0; d < rank; ++d) {
    base += dims[d].start * strides[d];
    step[d] = dims[d].step * strides[d];
  }
  int64_t inner = dims[rank - 1].count, innerStep = step[rank - 1];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= dims[d].count;
  std::vector<int64_t> idx(rank, 0);
  int64_t off = base;
  for (int64_t r = 0; r < rows; ++r) {
    E *row = dst + off;
    for (int64_t i = 0; i < inner; ++i) row[i * innerStep] = src[i];
    src += inner;
    // Next row: advance the outer index like an odometer.
    for (size_t d = rank - 1; d-- > 0;) {
      off += step[d];
      if (++idx[d] < dims[d].count) break;
      off -= step[d] * idx[d];
      idx[d] = 0;
    }
  }
}

llvm::Error sliceGradKernel(KernelContext &c) {
  const Tensor *dy = c.input(0), *starts = c.input(1), *ends = c.input(2);
  if (!dy || !starts || !ends) return kernelError("megac.SliceGrad", "expects (dY, starts, ends, axes?, steps?)");
  Tensor &out = c.output(0);
  if (out.dtype() != dy->dtype()) return kernelError("megac.SliceGrad", "output and dY differ in dtype");
  auto dims = resolveSlice(out.shape(), starts->toInt64Vector(), ends->toInt64Vector(), optionalInts(c, 3),
                           optionalInts(c, 4));
  if (!dims) return kernelError("megac.SliceGrad", llvm::toString(dims.takeError()));
  Shape sliced;
  for (const SliceDim &d : *dims) sliced.push_back(d.count);
  if (sliced != dy->shape())
    return kernelError("megac.SliceGrad", "dY " + shapeToString(dy->shape()) + " is not the shape of the slice, " +
                                              shapeToString(sliced));
  std::memset(out.raw(), 0, out.nbytes());
  if (dy->numel() == 0) return llvm::Error::success();
  std::vector<int64_t> strides = rowMajorStrides(out.shape());
  switch (dtypeSize(dy->dtype())) {
  case 1: scatterSlice(dy->data<uint8_t>(), out.data<uint8_t>(), *dims, strides); break;
  case 2: scatterSlice(dy->data<uint16_t>(), out.data<uint16_t>(), *dims, strides); break;
  case 4: scatterSlice(dy->data<uint32_t>(), out.data<uint32_t>(), *dims, strides); break;
  case 8: scatterSlice(dy->data<uint64_t>(), out.data<uint64_t>(), *dims, strides); break;
  default: return kernelError("megac.SliceGrad", llvm::Twine("unsupported element type ") + dtypeName(dy->dtype()));
  }
  return llvm::Error::success();
}

} // namespace

void registerBasicGradKernels() {
  registerKernel("megac.GeluGrad", geluGradKernel);
  registerKernel("megac.SliceGrad", sliceGradKernel);
}

} // namespace megac::cpu
