// LayerNormalization (opset 17) and RMSNormalization (opset 23). Statistics
// and the normalized values are computed in double (at least as precise as
// the stash type), then rounded to the outputs' dtypes; RMSNormalization of
// f32 with an f32 stash rounds its normalized values to f32 first.
#include "runtime/cpu/FloatRows.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/NormAttentionShapes.h"

#include <cmath>

namespace megac::cpu {

namespace {

Tensor *optionalOutput(KernelContext &ctx, size_t i) {
  if (i >= ctx.outputs.size() || !ctx.outputs[i] || !ctx.outputs[i]->defined()) return nullptr;
  return ctx.outputs[i];
}

// A Scale or B tensor broadcast to X, with its offsets split at the
// normalization axis: X's element (row, col) uses values[outer[row] + inner[col]].
struct NormParam {
  std::vector<double> values;
  std::vector<int64_t> outer, inner;
  bool innerIsIdentity = false;

  // buf[c] = combine(buf[c], value at (row, c)) for the row's cols.
  template <class Fn> void apply(int64_t row, double *buf, int64_t cols, Fn combine) const {
    const double *v = values.data() + outer[size_t(row)];
    if (innerIsIdentity) {
      for (int64_t c = 0; c < cols; ++c) buf[c] = combine(buf[c], v[c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) buf[c] = combine(buf[c], v[inner[size_t(c)]]);
    }
  }
};

// Lambdas (not function pointers) so that apply() inlines them.
constexpr auto times = [](double a, double b) { return a * b; };
constexpr auto plus = [](double a, double b) { return a + b; };

NormParam makeNormParam(const Tensor &p, const Shape &x, int64_t axis) {
  NormParam r;
  r.values = readAll<double>(p);
  // p's strides, right-aligned to x; 0 where p is broadcast.
  std::vector<int64_t> own = rowMajorStrides(p.shape()), strides(x.size(), 0);
  size_t lead = x.size() - p.shape().size();
  for (size_t d = lead; d < x.size(); ++d) strides[d] = p.shape()[d - lead] == 1 ? 0 : own[d - lead];
  r.outer = offsetsOver(x, strides, 0, size_t(axis));
  r.inner = offsetsOver(x, strides, size_t(axis), x.size());
  r.innerIsIdentity = true;
  for (size_t i = 0; i < r.inner.size() && r.innerIsIdentity; ++i) r.innerIsIdentity = r.inner[i] == int64_t(i);
  return r;
}

llvm::Error checkOutputs(llvm::StringRef op, const Tensor &x, const Tensor &y) {
  if (y.shape() != x.shape())
    return kernelError(op,
                       "output shape " + shapeToString(y.shape()) + " differs from X's " + shapeToString(x.shape()));
  return llvm::Error::success();
}

// Shared setup of both norms: dims and broadcast parameters.
struct NormSetup {
  NormDims dims;
  NormParam scale, bias;
  bool hasBias = false;
  double epsilon = 0;
};

llvm::Expected<NormSetup> setupNorm(llvm::StringRef op, KernelContext &ctx, bool withBias) {
  const Tensor *x = ctx.input(0), *scale = ctx.input(1), *bias = withBias ? ctx.input(2) : nullptr;
  if (!x || !scale) return kernelError(op, "X and Scale are required");
  NormSetup s;
  auto d = normDims(x->shape(), ctx.attrs.getInt("axis", -1));
  if (!d) return kernelError(op, llvm::toString(d.takeError()));
  s.dims = *d;
  if (auto e = checkNormParam(scale->shape(), x->shape(), "Scale"))
    return kernelError(op, llvm::toString(std::move(e)));
  s.scale = makeNormParam(*scale, x->shape(), s.dims.axis);
  if (bias) {
    if (auto e = checkNormParam(bias->shape(), x->shape(), "B")) return kernelError(op, llvm::toString(std::move(e)));
    s.bias = makeNormParam(*bias, x->shape(), s.dims.axis);
    s.hasBias = true;
  }
  s.epsilon = double(ctx.attrs.getFloat("epsilon", 1e-5f));
  if (ctx.outputs.empty() || !ctx.outputs[0]) return kernelError(op, "output Y is missing");
  if (auto e = checkOutputs(op, *x, ctx.output(0))) return e;
  return s;
}

llvm::Error layerNormalization(KernelContext &ctx) {
  auto s = setupNorm("LayerNormalization", ctx, /*withBias=*/true);
  if (!s) return s.takeError();
  const Tensor &x = *ctx.input(0);
  Tensor &y = ctx.output(0);
  Tensor *meanOut = optionalOutput(ctx, 1), *invStdOut = optionalOutput(ctx, 2);
  const int64_t rows = s->dims.rows, cols = s->dims.cols;
  for (Tensor *t : {meanOut, invStdOut})
    if (t && t->numel() != rows)
      return kernelError("LayerNormalization", "Mean/InvStdDev output has " + llvm::Twine(t->numel()) +
                                                   " elements, expected " + llvm::Twine(rows));
  parallelFor(rows, cols * 8, [&](int64_t begin, int64_t end) {
    std::vector<double> buf(static_cast<size_t>(cols));
    for (int64_t r = begin; r < end; ++r) {
      readElements(x, r * cols, cols, buf.data());
      double sum = 0;
      for (double v : buf) sum += v;
      double mean = cols ? sum / double(cols) : 0;
      double sq = 0;
      for (double v : buf) sq += (v - mean) * (v - mean);
      double invStd = 1.0 / std::sqrt((cols ? sq / double(cols) : 0) + s->epsilon);
      for (double &v : buf) v = (v - mean) * invStd;
      s->scale.apply(r, buf.data(), cols, times);
      if (s->hasBias) s->bias.apply(r, buf.data(), cols, plus);
      writeElements(y, r * cols, cols, buf.data());
      if (meanOut) meanOut->setFromDouble(r, mean);
      if (invStdOut) invStdOut->setFromDouble(r, invStd);
    }
  });
  return llvm::Error::success();
}

llvm::Error rmsNormalization(KernelContext &ctx) {
  auto s = setupNorm("RMSNormalization", ctx, /*withBias=*/false);
  if (!s) return s.takeError();
  const Tensor &x = *ctx.input(0);
  Tensor &y = ctx.output(0);
  const int64_t rows = s->dims.rows, cols = s->dims.cols;
  // f32 X with the default f32 stash: the inverse RMS and the normalized
  // values are rounded to f32 before the scale, as ONNX specifies and as
  // PyTorch computes them (training trajectories amplify the difference).
  const bool f32 = x.dtype() == DType::F32 && ctx.attrs.getInt("stash_type", 1) == int64_t(DType::F32);
  parallelFor(rows, cols * 6, [&](int64_t begin, int64_t end) {
    std::vector<double> buf(static_cast<size_t>(cols));
    for (int64_t r = begin; r < end; ++r) {
      readElements(x, r * cols, cols, buf.data());
      double sq = 0;
      for (double v : buf) sq += v * v;
      double invRms = 1.0 / std::sqrt((cols ? sq / double(cols) : 0) + s->epsilon);
      if (f32) {
        invRms = double(float(invRms));
        for (double &v : buf) v = double(float(v * invRms));
      } else {
        for (double &v : buf) v *= invRms;
      }
      s->scale.apply(r, buf.data(), cols, times);
      writeElements(y, r * cols, cols, buf.data());
    }
  });
  return llvm::Error::success();
}

} // namespace

void registerNormKernels() {
  registerKernel("LayerNormalization", layerNormalization);
  registerKernel("RMSNormalization", rmsNormalization);
}

} // namespace megac::cpu
