// Attention (ONNX opset 23/24/25 semantics): per (batch, q head),
//   S = scale * Q K^T, optional softcap, + bias,
//   P = softmax(S) (a row whose keys are all masked is 0, not NaN), Y = P V.
// The bias combines attn_mask (bool: false -> -inf; numeric: added; a last
// dim shorter than the total length is padded with -inf), the causal
// frontier (key j visible to query i iff j <= i + offset), sliding windows
// and the nonpad_kv_seqlen padding mask. offset is past_seq with a past
// cache, nonpad_kv_seqlen[b] - q_seq with an external one, else 0. K/V heads
// are shared by groups of q heads (GQA): q head h reads kv head
// h / (q_heads / kv_heads). 3-D inputs are [batch, seq, heads * head_size].
#include "runtime/cpu/FloatRows.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/NormAttentionShapes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace megac::cpu {

namespace {

Tensor *optionalOutput(KernelContext &ctx, size_t i) {
  if (i >= ctx.outputs.size() || !ctx.outputs[i] || !ctx.outputs[i]->defined()) return nullptr;
  return ctx.outputs[i];
}

// Element (b, h, s, 0) of a [batch, heads, seq, dim] (4-D) or
// [batch, seq, heads * dim] (3-D) tensor.
struct HeadLayout {
  int64_t batchStride, headStride, rowStride;
  HeadLayout(bool is3D, int64_t heads, int64_t seq, int64_t dim)
      : batchStride(heads * seq * dim), headStride(is3D ? dim : seq * dim), rowStride(is3D ? heads * dim : dim) {}
  int64_t at(int64_t b, int64_t h, int64_t s) const { return b * batchStride + h * headStride + s * rowStride; }
};

// C[M x N] (row stride ldc) = alpha * A[M x K] * B[N x K]^T, both packed.
// ONNX's reference scales Q and K by sqrt(scale) each instead: the same up
// to rounding, but scaling the product keeps Q and K as given, so operands
// rounded to bf16 (the emulated compute mode) round as the GPU's and as the
// gradient's recomputation of the scores do.
void matmulABt(int64_t M, int64_t N, int64_t K, float alpha, const float *A, const float *B, float *C, int64_t ldc) {
  sgemmSerial(false, true, M, N, K, alpha, A, K, B, K, 0.0f, C, ldc);
}
void matmulABt(int64_t M, int64_t N, int64_t K, double alpha, const double *A, const double *B, double *C,
               int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += A[i * K + k] * B[j * K + k];
      C[i * ldc + j] = alpha * acc;
    }
}
// C[M x N] (row stride ldc) = A[M x K] * B[K x N], both packed.
void matmulAB(int64_t M, int64_t N, int64_t K, const float *A, const float *B, float *C, int64_t ldc) {
  sgemmSerial(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, ldc);
}
void matmulAB(int64_t M, int64_t N, int64_t K, const double *A, const double *B, double *C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    double *c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) c[j] = 0;
    for (int64_t k = 0; k < K; ++k) {
      double a = A[i * K + k];
      const double *b = B + k * N;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
    }
  }
}

// An output written as C values: the tensor's storage when its dtype is C,
// else a buffer converted into the tensor by finish().
template <class C> class OutputBuffer {
public:
  explicit OutputBuffer(Tensor *t) : t_(t) {
    if (!t) return;
    if (t->dtype() == (sizeof(C) == 4 ? DType::F32 : DType::F64)) {
      ptr_ = t->data<C>();
    } else {
      copy_.assign(size_t(t->numel()), C(0));
      ptr_ = copy_.data();
    }
  }
  OutputBuffer(const OutputBuffer &) = delete;
  OutputBuffer &operator=(const OutputBuffer &) = delete;
  C *data() { return ptr_; }
  void finish() {
    if (t_ && !copy_.empty()) writeElements(*t_, 0, t_->numel(), copy_.data());
  }

private:
  Tensor *t_;
  C *ptr_ = nullptr;
  std::vector<C> copy_;
};

template <class C> class AttentionKernel {
public:
  AttentionKernel(KernelContext &ctx, const AttentionDims &d)
      : ctx_(ctx), d_(d), q_(*ctx.input(0)), k_(*ctx.input(1)), v_(*ctx.input(2)),
        qLayout_(d.is3D, d.qHeads, d.qSeq, d.headSize), kLayout_(d.is3D, d.kvHeads, d.kvSeq, d.headSize),
        vLayout_(d.is3D, d.kvHeads, d.kvSeq, d.vHeadSize), yLayout_(d.is3D, d.qHeads, d.qSeq, d.vHeadSize),
        scale_(C(d.scale)) {
    if (const Tensor *pk = ctx.input(4)) pastK_.emplace(*pk);
    if (const Tensor *pv = ctx.input(5)) pastV_.emplace(*pv);
    if (const Tensor *n = ctx.input(6)) nonpad_ = n->toInt64Vector();
    if (const Tensor *m = ctx.input(3)) readMask(*m);
  }

  llvm::Error run() {
    OutputBuffer<C> y(&ctx_.output(0)), qk(optionalOutput(ctx_, 3));
    y_ = y.data();
    qk_ = qk.data();
    const int64_t units = d_.batch * d_.qHeads;
    const int64_t cost = d_.qSeq * d_.totalSeq * (d_.headSize + d_.vHeadSize + 8);
    parallelFor(units, cost, [&](int64_t begin, int64_t end) {
      Scratch s(d_);
      for (int64_t u = begin; u < end; ++u) runHead(u / d_.qHeads, u % d_.qHeads, s);
    });
    y.finish();
    qk.finish();
    writePresent(optionalOutput(ctx_, 1), *ctx_.input(1), pastK_ ? ctx_.input(4) : nullptr, kLayout_, d_.headSize);
    writePresent(optionalOutput(ctx_, 2), *ctx_.input(2), pastV_ ? ctx_.input(5) : nullptr, vLayout_, d_.vHeadSize);
    return llvm::Error::success();
  }

private:
  static constexpr C kNegInf = -std::numeric_limits<C>::infinity();

  struct Scratch {
    std::vector<C> q, k, v, scores, bias;
    explicit Scratch(const AttentionDims &d)
        : q(size_t(d.qSeq * d.headSize)), k(size_t(d.totalSeq * d.headSize)), v(size_t(d.totalSeq * d.vHeadSize)),
          scores(size_t(d.qSeq * d.totalSeq)), bias(size_t(d.totalSeq)) {}
  };

  // The mask as an additive bias in its own (rank-4 aligned) shape.
  void readMask(const Tensor &m) {
    maskBias_ = readAll<C>(m);
    if (m.dtype() == DType::Bool)
      for (C &b : maskBias_) b = b != C(0) ? C(0) : kNegInf;
    std::vector<int64_t> st = rowMajorStrides(d_.mask4);
    maskBatchStride_ = d_.mask4[0] == 1 ? 0 : st[0];
    maskHeadStride_ = d_.mask4[1] == 1 ? 0 : st[1];
    maskRowStride_ = d_.mask4[2] == 1 ? 0 : st[2];
    hasMask_ = true;
  }

  // Keys preceding the query block (the causal and window frontier).
  int64_t offsetFor(int64_t b) const {
    if (d_.pastSeq > 0) return d_.pastSeq;
    if (!nonpad_.empty()) return nonpad_[size_t(b)] - d_.qSeq;
    return 0;
  }

  // Fills the additive bias of query row i; returns false when every key is
  // masked.
  bool biasRow(int64_t b, int64_t h, int64_t i, C *bias) const {
    const int64_t T = d_.totalSeq;
    if (hasMask_) {
      const C *m = maskBias_.data() + b * maskBatchStride_ + h * maskHeadStride_ + i * maskRowStride_;
      const int64_t len = d_.mask4[3];
      for (int64_t j = 0; j < T; ++j) bias[j] = j < len ? m[j] : kNegInf;
    } else {
      std::fill(bias, bias + T, C(0));
    }
    const int64_t p = i + offsetFor(b); // the query's absolute position
    auto maskFrom = [&](int64_t j0) {
      for (int64_t j = std::max<int64_t>(j0, 0); j < T; ++j) bias[j] = kNegInf;
    };
    auto maskBefore = [&](int64_t j1) {
      for (int64_t j = 0; j < std::min(j1, T); ++j) bias[j] = kNegInf;
    };
    if (d_.causal) maskFrom(p + 1);
    if (d_.leftWindow >= 0) maskBefore(p - d_.leftWindow);
    if (d_.rightWindow >= 0) maskFrom(p + d_.rightWindow + 1);
    if (!nonpad_.empty()) maskFrom(nonpad_[size_t(b)]);
    for (int64_t j = 0; j < T; ++j)
      if (bias[j] != kNegInf) return true;
    return false;
  }

  // Copies a head's rows ([seq, dim] at `layout`) into a packed buffer.
  static void gatherRows(const C *src, const HeadLayout &layout, int64_t b, int64_t h, int64_t rows, int64_t dim,
                         C *dst) {
    for (int64_t r = 0; r < rows; ++r) {
      const C *s = src + layout.at(b, h, r);
      std::copy(s, s + dim, dst + r * dim);
    }
  }

  // K or V of kv head kvh, past rows first: [total_seq, dim].
  void gatherKV(const std::optional<FloatView<C>> &past, const FloatView<C> &cur, const HeadLayout &layout, int64_t b,
                int64_t kvh, int64_t dim, C *dst) const {
    const int64_t P = d_.pastSeq;
    if (past) {
      HeadLayout pastLayout(false, d_.kvHeads, P, dim);
      gatherRows(past->data(), pastLayout, b, kvh, P, dim, dst);
    }
    gatherRows(cur.data(), layout, b, kvh, d_.kvSeq, dim, dst + P * dim);
  }

  void storeQK(int64_t b, int64_t h, int64_t i, const C *row) {
    const int64_t T = d_.totalSeq;
    std::copy(row, row + T, qk_ + ((b * d_.qHeads + h) * d_.qSeq + i) * T);
  }

  // In place; a row whose maximum is -inf becomes 0.
  static void softmax(C *x, int64_t n) {
    C mx = kNegInf;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, x[j]);
    if (mx == kNegInf) {
      std::fill(x, x + n, C(0));
      return;
    }
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      x[j] = std::exp(x[j] - mx);
      sum += double(x[j]);
    }
    const C inv = C(1.0 / sum);
    for (int64_t j = 0; j < n; ++j) x[j] *= inv;
  }

  void runHead(int64_t b, int64_t h, Scratch &s) {
    const int64_t T = d_.totalSeq, hs = d_.headSize, vhs = d_.vHeadSize;
    const int64_t kvh = h / (d_.qHeads / d_.kvHeads);
    gatherRows(q_.data(), qLayout_, b, h, d_.qSeq, hs, s.q.data());
    gatherKV(pastK_, k_, kLayout_, b, kvh, hs, s.k.data());
    gatherKV(pastV_, v_, vLayout_, b, kvh, vhs, s.v.data());
    if (T > 0) matmulABt(d_.qSeq, T, hs, scale_, s.q.data(), s.k.data(), s.scores.data(), T);
    const C cap = C(d_.softcap);
    for (int64_t i = 0; i < d_.qSeq; ++i) {
      C *row = s.scores.data() + i * T;
      if (qk_ && d_.qkMode == 0) storeQK(b, h, i, row);
      if (cap > C(0))
        for (int64_t j = 0; j < T; ++j) row[j] = cap * std::tanh(row[j] / cap);
      if (qk_ && d_.qkMode == 1) storeQK(b, h, i, row);
      bool anyVisible = biasRow(b, h, i, s.bias.data());
      for (int64_t j = 0; j < T; ++j) row[j] += s.bias[size_t(j)];
      if (qk_ && d_.qkMode == 2) storeQK(b, h, i, row);
      if (anyVisible)
        softmax(row, T);
      else
        std::fill(row, row + T, C(0));
      if (qk_ && d_.qkMode == 3) storeQK(b, h, i, row);
    }
    C *y = y_ + yLayout_.at(b, h, 0);
    if (T > 0) matmulAB(d_.qSeq, vhs, T, s.scores.data(), s.v.data(), y, yLayout_.rowStride);
  }

  // present = concat(past, current) along the sequence, [batch, kv_heads, total, dim].
  void writePresent(Tensor *out, const Tensor &cur, const Tensor *past, const HeadLayout &layout, int64_t dim) {
    if (!out) return;
    const int64_t P = d_.pastSeq, T = d_.totalSeq;
    std::vector<C> row(static_cast<size_t>(dim));
    for (int64_t b = 0; b < d_.batch; ++b)
      for (int64_t h = 0; h < d_.kvHeads; ++h)
        for (int64_t j = 0; j < T; ++j) {
          if (j < P)
            readElements(*past, ((b * d_.kvHeads + h) * P + j) * dim, dim, row.data());
          else
            readElements(cur, layout.at(b, h, j - P), dim, row.data());
          writeElements(*out, ((b * d_.kvHeads + h) * T + j) * dim, dim, row.data());
        }
  }

  KernelContext &ctx_;
  const AttentionDims &d_;
  FloatView<C> q_, k_, v_;
  std::optional<FloatView<C>> pastK_, pastV_;
  HeadLayout qLayout_, kLayout_, vLayout_, yLayout_;
  C scale_;
  std::vector<int64_t> nonpad_;
  bool hasMask_ = false;
  std::vector<C> maskBias_;
  int64_t maskBatchStride_ = 0, maskHeadStride_ = 0, maskRowStride_ = 0;
  C *y_ = nullptr, *qk_ = nullptr;
};

llvm::Error checkOutputShape(KernelContext &ctx, size_t i, const Shape &want, const char *what) {
  if (i >= ctx.outputs.size() || !ctx.outputs[i] || !ctx.outputs[i]->defined()) {
    if (i == 0) return kernelError("Attention", "output Y is missing");
    return llvm::Error::success();
  }
  if (ctx.outputs[i]->shape() != want)
    return kernelError("Attention", llvm::Twine(what) + " output is " + shapeToString(ctx.outputs[i]->shape()) +
                                        ", expected " + shapeToString(want));
  return llvm::Error::success();
}

llvm::Error attention(KernelContext &ctx) {
  AttentionInputShapes in;
  const Shape *shapes[7] = {};
  for (size_t i = 0; i < 7; ++i)
    if (const Tensor *t = ctx.input(i)) shapes[i] = &t->shape();
  in.q = shapes[0], in.k = shapes[1], in.v = shapes[2], in.mask = shapes[3];
  in.pastKey = shapes[4], in.pastValue = shapes[5], in.nonpadKvSeqlen = shapes[6];
  auto d = attentionDims(ctx.attrs, in);
  if (!d) return kernelError("Attention", llvm::toString(d.takeError()));
  if (auto e = checkOutputShape(ctx, 0, d->yShape, "Y")) return e;
  if (auto e = checkOutputShape(ctx, 1, d->presentKeyShape, "present_key")) return e;
  if (auto e = checkOutputShape(ctx, 2, d->presentValueShape, "present_value")) return e;
  if (auto e = checkOutputShape(ctx, 3, d->qkShape, "qk_matmul_output")) return e;
  bool wide = ctx.input(0)->dtype() == DType::F64 || ctx.attrs.getInt("softmax_precision", 1) == 11;
  if (wide) return AttentionKernel<double>(ctx, *d).run();
  return AttentionKernel<float>(ctx, *d).run();
}

} // namespace

void registerAttentionKernels() { registerKernel("Attention", attention); }

} // namespace megac::cpu
