// CPU kernels for megac's training ops (see ir/ops/TrainingOps.cpp).
#include "runtime/cpu/CrossEntropyRows.h"
#include "runtime/cpu/Kernel.h"

#include <cmath>
#include <cstring>

namespace megac::cpu {

namespace {

template <class T>
llvm::Error crossEntropyRows(const char *op, const Tensor &logits, const Tensor &targets, int64_t ignore,
                             const std::function<void(int64_t row, const T *x, int64_t tgt, double lse)> &each,
                             int64_t *count) {
  int64_t V = logits.dim(-1), rows = logits.numel() / std::max<int64_t>(V, 1);
  const T *x = logits.data<T>();
  auto n = countTargets(op, targets, rows, V, ignore);
  if (!n) return n.takeError();
  *count = *n;
  parallelFor(rows, V * 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T *row = x + r * V;
      each(r, row, targets.getAsInt(r), rowLogSumExp(row, V));
    }
  });
  return llvm::Error::success();
}

template <class T> llvm::Error crossEntropy(KernelContext &c) {
  const Tensor &logits = *c.input(0), &targets = *c.input(1);
  int64_t ignore = c.attrs.getInt("ignore_index", -100);
  int64_t rows = logits.numel() / std::max<int64_t>(logits.dim(-1), 1);
  std::vector<double> perRow(size_t(rows), 0.0);
  int64_t count = 0;
  if (auto e = crossEntropyRows<T>("megac.SoftmaxCrossEntropy", logits, targets, ignore,
                                   [&](int64_t r, const T *row, int64_t t, double lse) {
                                     if (t != ignore) perRow[size_t(r)] = lse - double(row[t]);
                                   },
                                   &count))
    return e;
  double sum = 0;
  for (double v : perRow) sum += v;
  c.output(0).data<T>()[0] = T(count ? sum / double(count) : 0.0);
  return llvm::Error::success();
}

template <class T> llvm::Error crossEntropyGrad(KernelContext &c) {
  const Tensor &logits = *c.input(1), &targets = *c.input(2);
  double dloss = c.input(0)->getAsDouble(0);
  int64_t ignore = c.attrs.getInt("ignore_index", -100);
  int64_t V = logits.dim(-1);
  Tensor &out = c.output(0);
  std::memset(out.raw(), 0, out.nbytes());
  T *dx = out.data<T>();
  int64_t rows = logits.numel() / std::max<int64_t>(V, 1);
  auto count = countTargets("megac.SoftmaxCrossEntropyGrad", targets, rows, V, ignore);
  if (!count) return count.takeError();
  if (!*count) return llvm::Error::success();
  double scale = dloss / double(*count);
  int64_t dummy = 0;
  return crossEntropyRows<T>("megac.SoftmaxCrossEntropyGrad", logits, targets, ignore,
                             [&](int64_t r, const T *row, int64_t t, double lse) {
                               if (t != ignore) softmaxMinusOneHot(row, V, t, lse, scale, dx + r * V);
                             },
                             &dummy);
}

template <class T> llvm::Error sumToShape(KernelContext &c) {
  const Tensor &x = *c.input(0);
  Tensor &out = c.output(0);
  std::memset(out.raw(), 0, out.nbytes());
  size_t r = x.shape().size(), off = r - out.shape().size();
  // Strides of the output as seen from x's index space (0 on summed dims).
  std::vector<int64_t> ostr(r, 0), ostrides = rowMajorStrides(out.shape());
  for (size_t i = off; i < r; ++i) ostr[i] = out.shape()[i - off] == 1 ? 0 : ostrides[i - off];
  std::vector<double> acc(size_t(out.numel()), 0.0);
  std::vector<int64_t> idx(r, 0);
  const T *xd = x.data<T>();
  int64_t n = x.numel(), o = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc[size_t(o)] += double(xd[i]);
    for (size_t d = r; d-- > 0;) {
      o += ostr[d];
      if (++idx[d] < x.shape()[d]) break;
      o -= ostr[d] * idx[d];
      idx[d] = 0;
    }
  }
  for (int64_t i = 0; i < out.numel(); ++i) out.data<T>()[i] = T(acc[size_t(i)]);
  return llvm::Error::success();
}

template <class T> llvm::Error gatherGrad(KernelContext &c) {
  const Tensor &dy = *c.input(0), &indices = *c.input(1);
  Tensor &out = c.output(0);
  std::memset(out.raw(), 0, out.nbytes());
  int64_t rank = out.rank(), axis = c.attrs.getInt("axis", 0);
  if (axis < 0) axis += rank;
  int64_t outer = 1, inner = 1, n = out.shape()[size_t(axis)];
  for (int64_t i = 0; i < axis; ++i) outer *= out.shape()[size_t(i)];
  for (int64_t i = axis + 1; i < rank; ++i) inner *= out.shape()[size_t(i)];
  int64_t k = indices.numel();
  T *o = out.data<T>();
  const T *g = dy.data<T>();
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t j = 0; j < k; ++j) {
      int64_t idx = indices.getAsInt(j);
      if (idx < 0) idx += n;
      if (idx < 0 || idx >= n) return kernelError("megac.GatherGrad", "index " + llvm::Twine(idx) + " out of range");
      T *dst = o + (a * n + idx) * inner;
      const T *src = g + (a * k + j) * inner;
      for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
    }
  return llvm::Error::success();
}

template <template <class> class K> llvm::Error byFloatType(const char *op, DType t, KernelContext &c) {
  switch (t) {
  case DType::F32: return K<float>::run(c);
  case DType::F64: return K<double>::run(c);
  default: return kernelError(op, llvm::Twine("unsupported element type ") + dtypeName(t));
  }
}

template <class T> struct CE { static llvm::Error run(KernelContext &c) { return crossEntropy<T>(c); } };
template <class T> struct CEGrad { static llvm::Error run(KernelContext &c) { return crossEntropyGrad<T>(c); } };
template <class T> struct SumTo { static llvm::Error run(KernelContext &c) { return sumToShape<T>(c); } };
template <class T> struct GGrad { static llvm::Error run(KernelContext &c) { return gatherGrad<T>(c); } };

} // namespace

void registerBasicGradKernels();
void registerNNGradKernels();
void registerLinearCrossEntropyKernels();

void registerTrainingKernels() {
  registerBasicGradKernels();
  registerNNGradKernels();
  registerLinearCrossEntropyKernels();
  registerKernel("megac.SoftmaxCrossEntropy",
                 [](KernelContext &c) { return byFloatType<CE>("megac.SoftmaxCrossEntropy", c.input(0)->dtype(), c); });
  registerKernel("megac.SoftmaxCrossEntropyGrad", [](KernelContext &c) {
    return byFloatType<CEGrad>("megac.SoftmaxCrossEntropyGrad", c.input(1)->dtype(), c);
  });
  registerKernel("megac.SumToShape",
                 [](KernelContext &c) { return byFloatType<SumTo>("megac.SumToShape", c.input(0)->dtype(), c); });
  registerKernel("megac.GatherGrad",
                 [](KernelContext &c) { return byFloatType<GGrad>("megac.GatherGrad", c.input(0)->dtype(), c); });
}

} // namespace megac::cpu
