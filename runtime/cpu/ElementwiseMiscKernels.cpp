// Cast, CastLike, Where, Clip, Identity and Dropout (inference).
#include "runtime/cpu/ElementwiseCommon.h"
#include "runtime/cpu/ElementwiseKernels.h"
#include "runtime/cpu/UnaryOps.h"

#include <cstring>
#include <limits>

namespace megac::cpu {

namespace elementwise {

namespace {

template <class DTag, class S> typename DTag::type castValue(S v) {
  using D = typename DTag::type;
  if constexpr (DTag::isBool) return D(v != 0);
  else return convertNumber<D>(v);
}

// Converts src into dst's dtype. F16/BF16 arrive here as f32 (runViaF32).
llvm::Error castInto(llvm::StringRef opType, const Tensor &src, Tensor &dst) {
  if (src.shape() != dst.shape()) return kernelError(opType, "the output must have the input's shape");
  if (src.dtype() == dst.dtype()) {
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
    return llvm::Error::success();
  }
  bool dstOk = false;
  bool srcOk = dispatchType<kAll>(src.dtype(), [&](auto srcTag) {
    using S = typename decltype(srcTag)::type;
    dstOk = dispatchType<kAll>(dst.dtype(), [&](auto dstTag) {
      using DTag = decltype(dstTag);
      unaryLoop(src.data<S>(), dst.data<typename DTag::type>(), src.numel(),
                [](S v) { return castValue<DTag>(v); });
    });
  });
  if (!srcOk) return unsupportedType(opType, src.dtype(), "numeric or bool tensors");
  if (!dstOk) return unsupportedType(opType, dst.dtype(), "numeric or bool tensors");
  return llvm::Error::success();
}

// Cast and CastLike: the target type is the output's (inference set it from
// `to` or from CastLike's second input). `saturate` only concerns float8
// types, which megac does not have.
llvm::Error castKernel(KernelContext &ctx) {
  if (hasHalfLike(ctx)) return runViaF32(ctx, castKernel);
  auto x = requireInput("Cast", ctx, 0);
  if (!x) return x.takeError();
  return castInto("Cast", **x, ctx.output(0));
}

// Copies by element size: which value is taken does not depend on the type.
template <class T>
void whereLoop(const BroadcastPlan &plan, const uint8_t *cond, const T *x, const T *y, T *out) {
  plan.run(1, [&](int64_t o, const int64_t *in, int64_t n) {
    const int64_t sc = plan.innerStride(0), sx = plan.innerStride(1), sy = plan.innerStride(2);
    const uint8_t *pc = cond + in[0];
    const T *px = x + in[1], *py = y + in[2];
    T *po = out + o;
    if (sc && sx && sy) {
      for (int64_t i = 0; i < n; ++i) po[i] = pc[i] ? px[i] : py[i];
    } else {
      for (int64_t i = 0; i < n; ++i) po[i] = pc[i * sc] ? px[i * sx] : py[i * sy];
    }
  });
}

llvm::Error whereKernel(KernelContext &ctx) {
  const Tensor *in[3];
  for (size_t i = 0; i < 3; ++i) {
    auto t = requireInput("Where", ctx, i);
    if (!t) return t.takeError();
    in[i] = *t;
  }
  Tensor &out = ctx.output(0);
  if (in[0]->dtype() != DType::Bool) return kernelError("Where", "the condition must be a bool tensor");
  if (in[1]->dtype() != in[2]->dtype() || out.dtype() != in[1]->dtype())
    return kernelError("Where", "X, Y and the output must have the same element type");
  auto plan = makeBroadcastPlan("Where", out.shape(), {in[0], in[1], in[2]});
  if (!plan) return plan.takeError();
  const uint8_t *c = in[0]->data<uint8_t>();
  switch (dtypeSize(out.dtype())) {
  case 1: whereLoop(*plan, c, in[1]->data<uint8_t>(), in[2]->data<uint8_t>(), out.data<uint8_t>()); break;
  case 2: whereLoop(*plan, c, in[1]->data<uint16_t>(), in[2]->data<uint16_t>(), out.data<uint16_t>()); break;
  case 4: whereLoop(*plan, c, in[1]->data<uint32_t>(), in[2]->data<uint32_t>(), out.data<uint32_t>()); break;
  case 8: whereLoop(*plan, c, in[1]->data<uint64_t>(), in[2]->data<uint64_t>(), out.data<uint64_t>()); break;
  default: return unsupportedType("Where", out.dtype(), "tensors of any numeric or bool type");
  }
  return llvm::Error::success();
}

// Clip(x, min?, max?): min and max are optional scalars of x's type; the rule
// per element is clipValue (UnaryOps.h).
llvm::Error clipKernel(KernelContext &ctx) {
  if (hasHalfLike(ctx)) return runViaF32(ctx, clipKernel);
  auto x = requireInput("Clip", ctx, 0);
  if (!x) return x.takeError();
  const Tensor *lo = ctx.input(1), *hi = ctx.input(2);
  Tensor &out = ctx.output(0);
  for (const Tensor *bound : {lo, hi}) {
    if (!bound) continue;
    if (bound->numel() != 1) return kernelError("Clip", "min and max must be scalars");
    if (bound->dtype() != (*x)->dtype()) return kernelError("Clip", "min and max must have the input's element type");
  }
  if (out.dtype() != (*x)->dtype() || out.shape() != (*x)->shape())
    return kernelError("Clip", "the output must have the input's type and shape");
  bool ok = dispatchType<kNumeric>(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T low = lo ? *lo->data<T>() : std::numeric_limits<T>::lowest();
    const T high = hi ? *hi->data<T>() : std::numeric_limits<T>::max();
    unaryLoop((*x)->data<T>(), out.data<T>(), out.numel(), [low, high](T v) { return clipValue(v, low, high); });
  });
  if (!ok) return unsupportedType("Clip", out.dtype(), typeSetName(kNumeric));
  return llvm::Error::success();
}

llvm::Error copyInput(llvm::StringRef opType, KernelContext &ctx) {
  auto x = requireInput(opType, ctx, 0);
  if (!x) return x.takeError();
  Tensor &out = ctx.output(0);
  if (out.dtype() != (*x)->dtype() || out.shape() != (*x)->shape())
    return kernelError(opType, "the output must have the input's type and shape");
  std::memcpy(out.raw(), (*x)->raw(), out.nbytes());
  return llvm::Error::success();
}

llvm::Error identityKernel(KernelContext &ctx) { return copyInput("Identity", ctx); }

// Dropout at inference: y = x and the optional mask is all true. Training
// mode (a true training_mode input with a nonzero ratio) is refused.
llvm::Error dropoutKernel(KernelContext &ctx) {
  const Tensor *ratio = ctx.input(1), *training = ctx.input(2);
  if (training && training->numel() == 1 && training->getAsDouble(0) != 0) {
    double r = ratio && ratio->numel() == 1 ? ratio->getAsDouble(0) : 0.5;
    if (r != 0) return kernelError("Dropout", "training_mode=true is not supported; megac runs Dropout for inference only");
  }
  if (auto e = copyInput("Dropout", ctx)) return e;
  if (Tensor *mask = optionalOutput(ctx, 1)) {
    if (mask->dtype() != DType::Bool) return kernelError("Dropout", "the mask output must be a bool tensor");
    std::memset(mask->raw(), 1, mask->nbytes());
  }
  return llvm::Error::success();
}

} // namespace

void registerMiscKernels() {
  registerKernel("Cast", castKernel);
  registerKernel("CastLike", castKernel);
  registerKernel("Where", whereKernel);
  registerKernel("Clip", clipKernel);
  registerKernel("Identity", identityKernel);
  registerKernel("Dropout", dropoutKernel);
}

} // namespace elementwise

llvm::Expected<Tensor> castTensor(const Tensor &src, DType to) {
  if (dtypeSize(to) == 0)
    return kernelError("Cast", llvm::Twine("cannot cast to element type ") + dtypeName(to));
  Tensor out(to, src.shape());
  Attrs none;
  KernelContext ctx{none, {&src}, {&out}};
  if (auto e = elementwise::castKernel(ctx)) return e;
  return out;
}

} // namespace megac::cpu
