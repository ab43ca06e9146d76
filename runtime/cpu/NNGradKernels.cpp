// CPU kernels of the gradient helper ops declared in ir/ops/NNGradOps.cpp:
// softmax, the norms and attention backward. Sums that feed a division or a
// whole-row correction are accumulated in double.
#include "runtime/cpu/FloatRows.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/NormAttentionShapes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace megac::cpu {

namespace {

template <template <class> class K> llvm::Error byFloatType(llvm::StringRef op, DType t, KernelContext &c) {
  switch (t) {
  case DType::F32: return K<float>::run(c);
  case DType::F64: return K<double>::run(c);
  default: return kernelError(op, llvm::Twine("unsupported element type ") + dtypeName(t));
  }
}

llvm::Error requireShape(llvm::StringRef op, const char *what, const Tensor *t, const Shape &want) {
  if (!t) return kernelError(op, llvm::Twine(what) + " is missing");
  if (t->shape() != want)
    return kernelError(op, llvm::Twine(what) + " has shape " + shapeToString(t->shape()) + ", expected " +
                               shapeToString(want));
  return llvm::Error::success();
}

// --- Softmax / LogSoftmax ---

template <class T> llvm::Error softmaxGrad(KernelContext &c, bool isLog) {
  llvm::StringRef op = isLog ? "megac.LogSoftmaxGrad" : "megac.SoftmaxGrad";
  const Tensor &dy = *c.input(0), &y = *c.input(1);
  Tensor &dx = c.output(0);
  if (auto e = requireShape(op, "dY", &dy, y.shape())) return e;
  if (auto e = requireShape(op, "dX", &dx, y.shape())) return e;
  int64_t rank = y.rank(), axis = c.attrs.getInt("axis", -1);
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1)) return kernelError(op, "axis out of range");
  if (axis < 0) axis += rank;
  int64_t outer = 1, n = rank ? y.dim(axis) : 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= y.dim(i);
  for (int64_t i = axis + 1; i < rank; ++i) inner *= y.dim(i);
  const T *g = dy.data<T>(), *p = y.data<T>();
  T *out = dx.data<T>();
  // One "row" is the n elements along axis, `inner` apart.
  parallelFor(outer * inner, n * 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t base = (r / inner) * n * inner + r % inner;
      double s = 0;
      for (int64_t k = 0; k < n; ++k) {
        int64_t i = base + k * inner;
        s += isLog ? double(g[i]) : double(g[i]) * double(p[i]);
      }
      for (int64_t k = 0; k < n; ++k) {
        int64_t i = base + k * inner;
        out[i] = isLog ? T(double(g[i]) - std::exp(double(p[i])) * s) : T(double(p[i]) * (double(g[i]) - s));
      }
    }
  });
  return llvm::Error::success();
}

template <class T> struct SoftmaxGradK {
  static llvm::Error run(KernelContext &c) { return softmaxGrad<T>(c, false); }
};
template <class T> struct LogSoftmaxGradK {
  static llvm::Error run(KernelContext &c) { return softmaxGrad<T>(c, true); }
};

// --- LayerNormalization / RMSNormalization ---

// Scale broadcast to X, split at the axis: element (row, col) of X uses
// Scale's element outer[row] + inner[col].
struct ParamIndex {
  std::vector<int64_t> outer, inner;
  bool rowsShareParam = true; // outer is all zeros: Scale covers the normalized dims only
};

ParamIndex paramIndex(const Shape &param, const Shape &x, size_t axis) {
  std::vector<int64_t> own = rowMajorStrides(param), strides(x.size(), 0);
  size_t lead = x.size() - param.size();
  for (size_t d = lead; d < x.size(); ++d) strides[d] = param[d - lead] == 1 ? 0 : own[d - lead];
  ParamIndex p;
  p.outer = offsetsOver(x, strides, 0, axis);
  p.inner = offsetsOver(x, strides, axis, x.size());
  for (int64_t o : p.outer) p.rowsShareParam &= o == 0;
  return p;
}

llvm::Error normGrad(KernelContext &c, bool rms) {
  llvm::StringRef op = rms ? "megac.RMSNormalizationGrad" : "megac.LayerNormalizationGrad";
  const Tensor *dy = c.input(0), *x = c.input(1), *scale = c.input(2);
  if (!dy || !x || !scale) return kernelError(op, "dY, X and Scale are required");
  auto dims = normDims(x->shape(), c.attrs.getInt("axis", -1));
  if (!dims) return kernelError(op, llvm::toString(dims.takeError()));
  if (auto e = checkNormParam(scale->shape(), x->shape(), "Scale")) return kernelError(op, llvm::toString(std::move(e)));
  if (auto e = requireShape(op, "dY", dy, x->shape())) return e;
  if (auto e = requireShape(op, "dX", c.outputs[0], x->shape())) return e;
  if (auto e = requireShape(op, "dScale", c.outputs[1], scale->shape())) return e;
  const double eps = double(c.attrs.getFloat("epsilon", 1e-5f));
  const int64_t rows = dims->rows, cols = dims->cols;
  const ParamIndex pi = paramIndex(scale->shape(), x->shape(), size_t(dims->axis));
  const std::vector<double> s = readAll<double>(*scale);
  Tensor &dx = c.output(0);

  // Rows are split into chunks, each with its own dScale partial sum (summed
  // in chunk order afterwards, so the result does not depend on threading).
  const int64_t numChunks = std::max<int64_t>(1, std::min<int64_t>(numThreads(), rows));
  const int64_t chunkRows = (rows + numChunks - 1) / numChunks;
  std::vector<std::vector<double>> partial(size_t(numChunks), std::vector<double>(size_t(scale->numel()), 0.0));
  parallelFor(numChunks, chunkRows * cols * 16, [&](int64_t cb, int64_t ce) {
    std::vector<double> xr(static_cast<size_t>(cols)), gr(xr.size()), out(xr.size());
    for (int64_t chunk = cb; chunk < ce; ++chunk) {
      std::vector<double> &acc = partial[size_t(chunk)];
      for (int64_t r = chunk * chunkRows; r < std::min(rows, (chunk + 1) * chunkRows); ++r) {
        readElements(*x, r * cols, cols, xr.data());
        readElements(*dy, r * cols, cols, gr.data());
        double mean = 0;
        if (!rms) {
          for (double v : xr) mean += v;
          mean = cols ? mean / double(cols) : 0;
        }
        double sq = 0;
        for (double v : xr) sq += (v - mean) * (v - mean);
        const double inv = 1.0 / std::sqrt((cols ? sq / double(cols) : 0) + eps);
        const int64_t rowOff = pi.outer[size_t(r)];
        // xr becomes xhat, gr stays dY; g = dY * scale is formed on the fly.
        double sumG = 0, sumGX = 0;
        for (int64_t k = 0; k < cols; ++k) {
          double xhat = (xr[size_t(k)] - mean) * inv, dyk = gr[size_t(k)];
          int64_t si = rowOff + pi.inner[size_t(k)];
          double g = dyk * s[size_t(si)];
          xr[size_t(k)] = xhat;
          sumG += g;
          sumGX += g * xhat;
          acc[size_t(si)] += dyk * xhat;
        }
        const double meanG = rms || !cols ? 0 : sumG / double(cols), meanGX = cols ? sumGX / double(cols) : 0;
        for (int64_t k = 0; k < cols; ++k) {
          double g = gr[size_t(k)] * s[size_t(rowOff + pi.inner[size_t(k)])];
          out[size_t(k)] = inv * (g - meanG - xr[size_t(k)] * meanGX);
        }
        writeElements(dx, r * cols, cols, out.data());
      }
    }
  });
  std::vector<double> dScale(size_t(scale->numel()), 0.0);
  for (const auto &p : partial)
    for (size_t i = 0; i < p.size(); ++i) dScale[i] += p[i];
  writeElements(c.output(1), 0, scale->numel(), dScale.data());
  return llvm::Error::success();
}

bool isNormDType(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }

llvm::Error layerNormGradKernel(KernelContext &c) {
  if (!c.input(1) || !isNormDType(c.input(1)->dtype()))
    return kernelError("megac.LayerNormalizationGrad", "X must be a floating-point tensor");
  return normGrad(c, false);
}

llvm::Error rmsNormGradKernel(KernelContext &c) {
  if (!c.input(1) || !isNormDType(c.input(1)->dtype()))
    return kernelError("megac.RMSNormalizationGrad", "X must be a floating-point tensor");
  return normGrad(c, true);
}

// --- Attention ---

// C[MxN] = alpha * op(A) * op(B) + beta * C on the calling thread.
void gemmSerial(bool tA, bool tB, int64_t M, int64_t N, int64_t K, double alpha, const float *A, int64_t lda,
                const float *B, int64_t ldb, double beta, float *C, int64_t ldc) {
  sgemmSerial(tA, tB, M, N, K, float(alpha), A, lda, B, ldb, float(beta), C, ldc);
}

void gemmSerial(bool tA, bool tB, int64_t M, int64_t N, int64_t K, double alpha, const double *A, int64_t lda,
                const double *B, int64_t ldb, double beta, double *C, int64_t ldc) {
  std::vector<double> row(static_cast<size_t>(N));
  for (int64_t i = 0; i < M; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      double a = tA ? A[k * lda + i] : A[i * lda + k];
      if (a == 0) continue;
      if (tB)
        for (int64_t j = 0; j < N; ++j) row[size_t(j)] += a * B[j * ldb + k];
      else
        for (int64_t j = 0; j < N; ++j) row[size_t(j)] += a * B[k * ldb + j];
    }
    double *c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) c[j] = alpha * row[size_t(j)] + (beta == 0 ? 0.0 : beta * c[j]);
  }
}

// Where head h of batch b starts in a Q/K/V-shaped tensor, and the distance
// between its rows: [B, H, S, D] (4-D) or [B, S, H*D] (3-D).
struct HeadLayout {
  bool is3D;
  int64_t heads, seq, size;
  int64_t offset(int64_t b, int64_t h) const {
    return is3D ? b * seq * heads * size + h * size : (b * heads + h) * seq * size;
  }
  int64_t rowStride() const { return is3D ? heads * size : size; }
};

// The additive bias of head (b, h): attn_mask (padded with -inf past its last
// dim), is_causal, the sliding window and nonpad_kv_seqlen, as in the ONNX
// reference (no KV cache). bias[i * kv + j].
struct AttentionBias {
  const AttentionDims &d;
  const Tensor *mask;
  const Tensor *nonpad;

  void fill(int64_t b, int64_t h, std::vector<double> &bias) const {
    const int64_t q = d.qSeq, kv = d.totalSeq;
    const double ninf = -std::numeric_limits<double>::infinity();
    std::fill(bias.begin(), bias.end(), 0.0);
    if (mask) {
      const Shape &m = d.mask4;
      int64_t mb = m[0] == 1 ? 0 : b, mh = m[1] == 1 ? 0 : h, len = m[3];
      std::vector<double> row(static_cast<size_t>(len));
      bool isBool = mask->dtype() == DType::Bool;
      for (int64_t i = 0; i < q; ++i) {
        int64_t mi = m[2] == 1 ? 0 : i;
        readElements(*mask, ((mb * m[1] + mh) * m[2] + mi) * len, len, row.data());
        double *out = bias.data() + i * kv;
        for (int64_t j = 0; j < kv; ++j)
          out[j] = j >= len ? ninf : isBool ? (row[size_t(j)] != 0 ? 0.0 : ninf) : row[size_t(j)];
      }
    }
    int64_t offset = 0, valid = kv;
    if (nonpad) {
      valid = nonpad->getAsInt(b);
      offset = valid - q;
    }
    for (int64_t i = 0; i < q; ++i) {
      double *out = bias.data() + i * kv;
      for (int64_t j = 0; j < kv; ++j) {
        int64_t diff = i + offset - j;
        bool allowed = j < valid;
        if (d.causal) allowed &= diff >= 0;
        if (d.leftWindow >= 0) allowed &= diff <= d.leftWindow;
        if (d.rightWindow >= 0) allowed &= -diff <= d.rightWindow;
        if (!allowed) out[j] = ninf;
      }
    }
  }
};

template <class T> llvm::Error attentionGrad(KernelContext &c) {
  const llvm::StringRef op = "megac.AttentionGrad";
  const Tensor *dy = c.input(0), *q = c.input(1), *k = c.input(2), *v = c.input(3);
  const Tensor *mask = c.input(4), *nonpad = c.input(5);
  if (!dy || !q || !k || !v) return kernelError(op, "dY, Q, K and V are required");
  AttentionInputShapes in;
  in.q = &q->shape();
  in.k = &k->shape();
  in.v = &v->shape();
  if (mask) in.mask = &mask->shape();
  if (nonpad) in.nonpadKvSeqlen = &nonpad->shape();
  auto dims = attentionDims(c.attrs, in);
  if (!dims) return kernelError(op, llvm::toString(dims.takeError()));
  const AttentionDims &d = *dims;
  for (const Tensor *t : {k, v})
    if (t->dtype() != q->dtype()) return kernelError(op, "Q, K and V must share a dtype");
  if (mask && mask->dtype() != DType::Bool && !isFloatType(mask->dtype()))
    return kernelError(op, "attn_mask must be bool or floating point");
  if (auto e = requireShape(op, "dY", dy, d.yShape)) return e;
  if (auto e = requireShape(op, "dQ", c.outputs[0], q->shape())) return e;
  if (auto e = requireShape(op, "dK", c.outputs[1], k->shape())) return e;
  if (auto e = requireShape(op, "dV", c.outputs[2], v->shape())) return e;
  if (nonpad)
    for (int64_t b = 0; b < d.batch; ++b)
      if (nonpad->getAsInt(b) < 0 || nonpad->getAsInt(b) > d.totalSeq)
        return kernelError(op, "nonpad_kv_seqlen[" + llvm::Twine(b) + "] = " + llvm::Twine(nonpad->getAsInt(b)) +
                                   " is outside [0, " + llvm::Twine(d.totalSeq) + "]");

  const int64_t S = d.qSeq, L = d.totalSeq, D = d.headSize, Dv = d.vHeadSize;
  const int64_t group = d.qHeads / d.kvHeads;
  const HeadLayout ql{d.is3D, d.qHeads, S, D}, kl{d.is3D, d.kvHeads, L, D}, vl{d.is3D, d.kvHeads, L, Dv},
      yl{d.is3D, d.qHeads, S, Dv};
  const double scale = d.scale, cap = d.softcap;
  const T *Q = q->data<T>(), *K = k->data<T>(), *V = v->data<T>(), *dO = dy->data<T>();
  T *dQ = c.output(0).data<T>();
  // dK and dV per query head, summed over each KV head's group afterwards.
  std::vector<T> dKh(size_t(d.batch * d.qHeads * L * D)), dVh(size_t(d.batch * d.qHeads * L * Dv));
  const AttentionBias biasOf{d, mask, nonpad};

  parallelFor(d.batch * d.qHeads, S * L * (2 * D + 2 * Dv + 16), [&](int64_t tb, int64_t te) {
    std::vector<double> bias(size_t(S * L));
    std::vector<T> P(size_t(S * L)), dP(size_t(S * L));
    std::vector<double> t(cap > 0 ? size_t(S * L) : 0); // tanh(scores / softcap)
    std::vector<double> ex(static_cast<size_t>(L));
    for (int64_t task = tb; task < te; ++task) {
      const int64_t b = task / d.qHeads, h = task % d.qHeads, kvh = h / group;
      const T *Qh = Q + ql.offset(b, h), *Kh = K + kl.offset(b, kvh), *Vh = V + vl.offset(b, kvh);
      const T *dOh = dO + yl.offset(b, h);
      T *dQh = dQ + ql.offset(b, h), *dKt = dKh.data() + task * L * D, *dVt = dVh.data() + task * L * Dv;
      biasOf.fill(b, h, bias);
      // P = softmax(softcap(scale * Q K^T) + bias), zero on fully masked rows.
      gemmSerial(false, true, S, L, D, scale, Qh, ql.rowStride(), Kh, kl.rowStride(), 0.0, P.data(), L);
      for (int64_t i = 0; i < S; ++i) {
        T *p = P.data() + i * L;
        const double *bi = bias.data() + i * L;
        double mx = -std::numeric_limits<double>::infinity(), biasMax = mx;
        for (int64_t j = 0; j < L; ++j) {
          double sc = double(p[j]);
          if (cap > 0) {
            double th = std::tanh(sc / cap);
            t[size_t(i * L + j)] = th;
            sc = cap * th;
          }
          sc += bi[j];
          biasMax = std::max(biasMax, bi[j]);
          mx = std::max(mx, sc);
          p[j] = T(sc);
        }
        if (biasMax == -std::numeric_limits<double>::infinity() || std::isinf(mx)) {
          std::fill(p, p + L, T(0));
          continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < L; ++j) sum += (ex[size_t(j)] = std::exp(double(p[j]) - mx));
        for (int64_t j = 0; j < L; ++j) p[j] = T(ex[size_t(j)] / sum);
      }
      // dV_h = P^T dO_h;  dP = dO_h V^T.
      gemmSerial(true, false, L, Dv, S, 1.0, P.data(), L, dOh, yl.rowStride(), 0.0, dVt, Dv);
      gemmSerial(false, true, S, L, Dv, 1.0, dOh, yl.rowStride(), Vh, vl.rowStride(), 0.0, dP.data(), L);
      // dS = P * (dP - rowsum(dP * P)), through the softcap's tanh.
      for (int64_t i = 0; i < S; ++i) {
        T *g = dP.data() + i * L;
        const T *p = P.data() + i * L;
        double dot = 0;
        for (int64_t j = 0; j < L; ++j) dot += double(g[j]) * double(p[j]);
        for (int64_t j = 0; j < L; ++j) {
          double ds = double(p[j]) * (double(g[j]) - dot);
          if (cap > 0) {
            double th = t[size_t(i * L + j)];
            ds *= 1 - th * th;
          }
          g[j] = T(ds);
        }
      }
      // dQ_h = scale dS K;  dK_h = scale dS^T Q_h.
      gemmSerial(false, false, S, D, L, scale, dP.data(), L, Kh, kl.rowStride(), 0.0, dQh, ql.rowStride());
      gemmSerial(true, false, L, D, S, scale, dP.data(), L, Qh, ql.rowStride(), 0.0, dKt, D);
    }
  });

  // Sum each group's per-query-head dK/dV into its KV head.
  T *dK = c.output(1).data<T>(), *dV = c.output(2).data<T>();
  parallelFor(d.batch * d.kvHeads, group * L * (D + Dv), [&](int64_t tb, int64_t te) {
    std::vector<double> acc;
    for (int64_t task = tb; task < te; ++task) {
      const int64_t b = task / d.kvHeads, kvh = task % d.kvHeads;
      auto reduce = [&](const std::vector<T> &perHead, int64_t width, const HeadLayout &lay, T *out) {
        acc.assign(size_t(L * width), 0.0);
        for (int64_t g = 0; g < group; ++g) {
          const T *src = perHead.data() + (b * d.qHeads + kvh * group + g) * L * width;
          for (int64_t i = 0; i < L * width; ++i) acc[size_t(i)] += double(src[i]);
        }
        T *dst = out + lay.offset(b, kvh);
        for (int64_t j = 0; j < L; ++j)
          for (int64_t x = 0; x < width; ++x) dst[j * lay.rowStride() + x] = T(acc[size_t(j * width + x)]);
      };
      reduce(dKh, D, kl, dK);
      reduce(dVh, Dv, vl, dV);
    }
  });
  return llvm::Error::success();
}

template <class T> struct AttentionGradK {
  static llvm::Error run(KernelContext &c) { return attentionGrad<T>(c); }
};

} // namespace

void registerNNGradKernels() {
  registerKernel("megac.SoftmaxGrad", [](KernelContext &c) {
    return byFloatType<SoftmaxGradK>("megac.SoftmaxGrad", c.input(1)->dtype(), c);
  });
  registerKernel("megac.LogSoftmaxGrad", [](KernelContext &c) {
    return byFloatType<LogSoftmaxGradK>("megac.LogSoftmaxGrad", c.input(1)->dtype(), c);
  });
  registerKernel("megac.LayerNormalizationGrad", layerNormGradKernel);
  registerKernel("megac.RMSNormalizationGrad", rmsNormGradKernel);
  registerKernel("megac.AttentionGrad", [](KernelContext &c) {
    if (!c.input(1)) return kernelError("megac.AttentionGrad", "Q is required");
    return byFloatType<AttentionGradK>("megac.AttentionGrad", c.input(1)->dtype(), c);
  });
}

} // namespace megac::cpu
