// megac.SwiGLU(G, U) = G * sigmoid(G) * U and megac.SwiGLUGrad(dY, G, U) ->
// (dG, dU) (ir/ops/SwiGLUOps.cpp): f32 and f64, f16/bf16 through f32. Flat
// loops over equal shapes, split over threads. The formulas are in
// SwiGLUMath.h.
#include "runtime/cpu/ElementwiseCommon.h"
#include "runtime/cpu/SwiGLUMath.h"

namespace megac::cpu {

namespace {

using elementwise::dispatchType;
using elementwise::hasHalfLike;
using elementwise::kFloat;
using elementwise::runViaF32;

// Output i if the caller asked for it, else nullptr.
Tensor *outputOrNull(const KernelContext &c, size_t i) {
  return i < c.outputs.size() && c.outputs[i] && c.outputs[i]->defined() ? c.outputs[i] : nullptr;
}

// The inputs (n of them) and outputs must all have G's dtype and shape.
llvm::Error checkOperands(llvm::StringRef op, const KernelContext &c, size_t n, size_t outs) {
  for (size_t i = 0; i < n; ++i)
    if (!c.input(i)) return kernelError(op, "input " + llvm::Twine(i) + " is missing");
  if (!outputOrNull(c, 0) && (outs == 1 || !outputOrNull(c, 1))) return kernelError(op, "no output is asked for");
  const Tensor &g = *c.input(n - 2);
  for (size_t i = 0; i < n; ++i)
    if (c.input(i)->shape() != g.shape() || c.input(i)->dtype() != g.dtype())
      return kernelError(op, "input " + llvm::Twine(i) + " " + shapeToString(c.input(i)->shape()) +
                                 " differs from G " + shapeToString(g.shape()) + " in shape or dtype");
  for (size_t i = 0; i < outs; ++i)
    if (Tensor *o = outputOrNull(c, i); o && (o->shape() != g.shape() || o->dtype() != g.dtype()))
      return kernelError(op, "output " + llvm::Twine(i) + " must have G's shape and dtype");
  return llvm::Error::success();
}

llvm::Error swiglu(KernelContext &c) {
  const char *op = "megac.SwiGLU";
  if (auto e = checkOperands(op, c, 2, 1)) return e;
  if (hasHalfLike(c)) return runViaF32(c, swiglu);
  const Tensor &gt = *c.input(0), &ut = *c.input(1);
  Tensor &yt = c.output(0);
  bool ok = dispatchType<kFloat>(gt.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *g = gt.data<T>(), *u = ut.data<T>();
    T *y = yt.data<T>();
    parallelFor(yt.numel(), 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = swigluValue(g[i], u[i]);
    });
  });
  if (!ok) return elementwise::unsupportedType(op, gt.dtype(), "floating-point tensors");
  return llvm::Error::success();
}

// With s = sigmoid(g): dU = dY g s and dG = dY u s (1 + g (1 - s)).
llvm::Error swigluGrad(KernelContext &c) {
  const char *op = "megac.SwiGLUGrad";
  if (auto e = checkOperands(op, c, 3, 2)) return e;
  if (hasHalfLike(c)) return runViaF32(c, swigluGrad);
  const Tensor &dyt = *c.input(0), &gt = *c.input(1), &ut = *c.input(2);
  Tensor *dgt = outputOrNull(c, 0), *dut = outputOrNull(c, 1);
  bool ok = dispatchType<kFloat>(gt.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *dy = dyt.data<T>(), *g = gt.data<T>(), *u = ut.data<T>();
    T *dg = dgt ? dgt->data<T>() : nullptr, *du = dut ? dut->data<T>() : nullptr;
    parallelFor(gt.numel(), 24, [&](int64_t b, int64_t e) {
      if (dg && du) {
        for (int64_t i = b; i < e; ++i) {
          T s = swigluSigmoid(g[i]);
          dg[i] = swigluGradG(dy[i], g[i], u[i], s);
          du[i] = swigluGradU(dy[i], g[i], s);
        }
      } else if (dg) {
        for (int64_t i = b; i < e; ++i) dg[i] = swigluGradG(dy[i], g[i], u[i], swigluSigmoid(g[i]));
      } else if (du) {
        for (int64_t i = b; i < e; ++i) du[i] = swigluGradU(dy[i], g[i], swigluSigmoid(g[i]));
      }
    });
  });
  if (!ok) return elementwise::unsupportedType(op, gt.dtype(), "floating-point tensors");
  return llvm::Error::success();
}

} // namespace

void registerSwiGLUKernels() {
  registerKernel("megac.SwiGLU", swiglu);
  registerKernel("megac.SwiGLUGrad", swigluGrad);
}

} // namespace megac::cpu
