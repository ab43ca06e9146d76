// CPU kernels of megac.LinearCrossEntropy[Grad] (ir/ops/LinearCrossEntropyOps.cpp):
// the head's product and the softmax cross-entropy, a chunk of rows at a
// time (linearCrossEntropyChunkRows), so only one chunk of logits
// exists. Row arithmetic as megac.SoftmaxCrossEntropy[Grad] (CrossEntropyRows.h).
//
// With h [N, H] (leading dims flattened) and W [H, V] (trans_w: [V, H]):
//   forward: per chunk, logits = h_c W; loss = mean over counted rows of lse - logit[t]
//   grad:    per chunk, recompute logits, dl = (softmax - onehot) * dloss / count,
//            dh_c = dl W^T, dW += h_c^T dl (dW += dl^T h_c with trans_w)
#include "runtime/cpu/CrossEntropyRows.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/LinearCrossEntropyChunks.h"

#include <cstring>

namespace megac::cpu {

namespace {

// C = op(A) op(B) + beta C on row-major data: sgemm for float, a plain loop
// (double accumulation) for double.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
          float beta, float *C, int64_t ldc) {
  sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double *A, int64_t lda, const double *B,
          int64_t ldb, double beta, double *C, int64_t ldc) {
  parallelFor(M, N * K, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
        C[i * ldc + j] = acc + (beta == 0 ? 0.0 : beta * C[i * ldc + j]);
      }
  });
}

struct Dims {
  int64_t rows = 0, hidden = 0, vocab = 0, chunk = 1;
  bool transW = false;
};

llvm::Expected<Dims> dims(const char *op, const Attrs &attrs, const Tensor *h, const Tensor *w, const Tensor *targets) {
  if (!h || !w || !targets) return kernelError(op, "needs h, W and targets");
  if (h->dtype() != w->dtype()) return kernelError(op, "h and W have different element types");
  if (h->rank() < 1 || w->rank() != 2) return kernelError(op, "expected h [..., H] and a 2-D W");
  Dims d;
  d.transW = attrs.getInt("trans_w", 0) != 0;
  d.hidden = h->dim(-1);
  d.vocab = d.transW ? w->dim(0) : w->dim(1);
  if ((d.transW ? w->dim(1) : w->dim(0)) != d.hidden)
    return kernelError(op, "h " + shapeToString(h->shape()) + " and W " + shapeToString(w->shape()) +
                               " differ in the hidden size");
  d.rows = h->numel() / std::max<int64_t>(d.hidden, 1);
  if (targets->numel() != d.rows)
    return kernelError(op, "targets " + shapeToString(targets->shape()) + " do not match h " +
                               shapeToString(h->shape()));
  d.chunk = cpu::linearCrossEntropyChunkRows(d.rows, d.vocab, attrs.getInt("chunk_rows", 0));
  return d;
}

// logits[0, n) = h rows [r0, r0 + n) times W.
template <class T> void chunkLogits(const Dims &d, const T *h, const T *w, int64_t r0, int64_t n, T *logits) {
  gemm(false, d.transW, n, d.vocab, d.hidden, h + r0 * d.hidden, d.hidden, w, d.transW ? d.hidden : d.vocab, T(0),
       logits, d.vocab);
}

template <class T> llvm::Error forward(KernelContext &c) {
  const char *op = "megac.LinearCrossEntropy";
  const Tensor *h = c.input(0), *w = c.input(1), *targets = c.input(2);
  auto d = dims(op, c.attrs, h, w, targets);
  if (!d) return d.takeError();
  const int64_t ignore = c.attrs.getInt("ignore_index", -100);
  auto count = countTargets(op, *targets, d->rows, d->vocab, ignore);
  if (!count) return count.takeError();
  std::vector<double> perRow(size_t(d->rows), 0.0);
  std::vector<T> logits(size_t(d->chunk * d->vocab));
  for (int64_t r0 = 0; r0 < d->rows && *count; r0 += d->chunk) {
    const int64_t n = std::min(d->chunk, d->rows - r0);
    chunkLogits(*d, h->data<T>(), w->data<T>(), r0, n, logits.data());
    parallelFor(n, d->vocab * 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t t = targets->getAsInt(r0 + i);
        if (t == ignore) continue;
        const T *row = logits.data() + i * d->vocab;
        perRow[size_t(r0 + i)] = rowLogSumExp(row, d->vocab) - double(row[t]);
      }
    });
  }
  double sum = 0;
  for (double v : perRow) sum += v; // in row order, as the unfused kernel
  c.output(0).data<T>()[0] = T(*count ? sum / double(*count) : 0.0);
  return llvm::Error::success();
}

template <class T> llvm::Error backward(KernelContext &c) {
  const char *op = "megac.LinearCrossEntropyGrad";
  const Tensor *dloss = c.input(0), *h = c.input(1), *w = c.input(2), *targets = c.input(3);
  if (!dloss || dloss->numel() != 1) return kernelError(op, "dloss must be a scalar");
  auto d = dims(op, c.attrs, h, w, targets);
  if (!d) return d.takeError();
  Tensor &dh = c.output(0), &dw = c.output(1);
  std::memset(dh.raw(), 0, dh.nbytes());
  std::memset(dw.raw(), 0, dw.nbytes());
  const int64_t ignore = c.attrs.getInt("ignore_index", -100);
  auto count = countTargets(op, *targets, d->rows, d->vocab, ignore);
  if (!count) return count.takeError();
  if (!*count) return llvm::Error::success();
  const double scale = dloss->getAsDouble(0) / double(*count);
  const int64_t H = d->hidden, V = d->vocab;
  const T *hd = h->data<T>(), *wd = w->data<T>();
  std::vector<T> dl(size_t(d->chunk * V));
  for (int64_t r0 = 0; r0 < d->rows; r0 += d->chunk) {
    const int64_t n = std::min(d->chunk, d->rows - r0);
    chunkLogits(*d, hd, wd, r0, n, dl.data());
    parallelFor(n, V * 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T *row = dl.data() + i * V;
        const int64_t t = targets->getAsInt(r0 + i);
        if (t == ignore) std::fill(row, row + V, T(0));
        else softmaxMinusOneHot(row, V, t, rowLogSumExp(row, V), scale, row); // in place: read then written
      }
    });
    // dh_c = dl W^T ([n, V] x [V, H]); W^T is W as stored [H, V] transposed, or [V, H] as is.
    gemm(false, !d->transW, n, H, V, dl.data(), V, wd, d->transW ? H : V, T(0), dh.data<T>() + r0 * H, H);
    if (d->transW) gemm(true, false, V, H, n, dl.data(), V, hd + r0 * H, H, T(1), dw.data<T>(), H);
    else gemm(true, false, H, V, n, hd + r0 * H, H, dl.data(), V, T(1), dw.data<T>(), V);
  }
  return llvm::Error::success();
}

template <template <class> class K> llvm::Error byFloatType(const char *op, const Tensor *t, KernelContext &c) {
  if (!t) return kernelError(op, "missing input");
  switch (t->dtype()) {
  case DType::F32: return K<float>::run(c);
  case DType::F64: return K<double>::run(c);
  default: return kernelError(op, llvm::Twine("unsupported element type ") + dtypeName(t->dtype()));
  }
}

template <class T> struct Fwd { static llvm::Error run(KernelContext &c) { return forward<T>(c); } };
template <class T> struct Bwd { static llvm::Error run(KernelContext &c) { return backward<T>(c); } };

} // namespace

void registerLinearCrossEntropyKernels() {
  registerKernel("megac.LinearCrossEntropy",
                 [](KernelContext &c) { return byFloatType<Fwd>("megac.LinearCrossEntropy", c.input(0), c); });
  registerKernel("megac.LinearCrossEntropyGrad",
                 [](KernelContext &c) { return byFloatType<Bwd>("megac.LinearCrossEntropyGrad", c.input(1), c); });
}

} // namespace megac::cpu
