#pragma once
// Internals shared by the elementwise kernel files: dtype dispatch, the
// f16/bf16-through-f32 wrapper and the inner loops.
#include "runtime/cpu/Broadcast.h"
#include "runtime/cpu/ConvertNumber.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/TypeSets.h"

#include <cstdint>

namespace megac::cpu::elementwise {

// The C++ element type for a dtype. Bool is stored as uint8_t (0 or 1), so
// the tag carries whether it is a bool.
template <class T, bool Bool = false> struct TypeTag {
  using type = T;
  static constexpr bool isBool = Bool;
};

// Calls fn(TypeTag<T>{}) for dtype's C++ type when dtype is in Sets; returns
// false (calling nothing) otherwise.
template <unsigned Sets, class Fn> bool dispatchType(DType t, Fn &&fn) {
  switch (t) {
  case DType::F32: if constexpr (bool(Sets & kFloat)) { fn(TypeTag<float>{}); return true; } break;
  case DType::F64: if constexpr (bool(Sets & kFloat)) { fn(TypeTag<double>{}); return true; } break;
  case DType::I8: if constexpr (bool(Sets & kSignedInt)) { fn(TypeTag<int8_t>{}); return true; } break;
  case DType::I16: if constexpr (bool(Sets & kSignedInt)) { fn(TypeTag<int16_t>{}); return true; } break;
  case DType::I32: if constexpr (bool(Sets & kSignedInt)) { fn(TypeTag<int32_t>{}); return true; } break;
  case DType::I64: if constexpr (bool(Sets & kSignedInt)) { fn(TypeTag<int64_t>{}); return true; } break;
  case DType::U8: if constexpr (bool(Sets & kUnsignedInt)) { fn(TypeTag<uint8_t>{}); return true; } break;
  case DType::U16: if constexpr (bool(Sets & kUnsignedInt)) { fn(TypeTag<uint16_t>{}); return true; } break;
  case DType::U32: if constexpr (bool(Sets & kUnsignedInt)) { fn(TypeTag<uint32_t>{}); return true; } break;
  case DType::U64: if constexpr (bool(Sets & kUnsignedInt)) { fn(TypeTag<uint64_t>{}); return true; } break;
  case DType::Bool: if constexpr (bool(Sets & kBool)) { fn(TypeTag<uint8_t, true>{}); return true; } break;
  default: break;
  }
  return false;
}

// "floating-point tensors", "numeric tensors"... for error messages.
inline const char *typeSetName(unsigned sets) {
  switch (sets) {
  case kFloat: return "floating-point tensors";
  case kSigned: return "floating-point or signed integer tensors";
  case kNumeric: return "numeric tensors";
  case kUnsignedInt: return "unsigned integer tensors";
  case kBool: return "bool tensors";
  case kNumeric | kBool: return "numeric or bool tensors";
  default: return "tensors of other types";
  }
}

inline bool isHalfLike(DType t) { return t == DType::F16 || t == DType::BF16; }

// True if any input or output of ctx is f16/bf16.
bool hasHalfLike(const KernelContext &ctx);
// Runs fn with every f16/bf16 input converted to f32 and every f16/bf16
// output computed in f32, then rounded back.
llvm::Error runViaF32(KernelContext &ctx, KernelFn fn);

// "OP: input i is a u8 tensor; OP supports <what>".
llvm::Error unsupportedType(llvm::StringRef opType, DType t, llvm::StringRef what);
// Checks that input i exists; an error naming the op otherwise.
llvm::Expected<const Tensor *> requireInput(llvm::StringRef opType, const KernelContext &ctx, size_t i);
// Output i when the op's caller asked for it, else nullptr.
Tensor *optionalOutput(const KernelContext &ctx, size_t i);

// out = f(a, b) over a broadcast plan of (a, b). Rows whose operands are
// contiguous or scalar get their own loops so they vectorize.
template <class A, class B, class R, class F>
void binaryLoop(const BroadcastPlan &plan, const A *a, const B *b, R *out, F f, int64_t cost = 1) {
  const bool sa = plan.innerStride(0) != 0, sb = plan.innerStride(1) != 0;
  plan.run(cost, [&](int64_t o, const int64_t *in, int64_t n) {
    const A *pa = a + in[0];
    const B *pb = b + in[1];
    R *po = out + o;
    if (sa && sb) {
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    } else if (sa) {
      const B y = *pb;
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], y);
    } else if (sb) {
      const A x = *pa;
      for (int64_t i = 0; i < n; ++i) po[i] = f(x, pb[i]);
    } else {
      const R v = f(*pa, *pb);
      for (int64_t i = 0; i < n; ++i) po[i] = v;
    }
  });
}

// y = f(x) over n contiguous elements.
template <class T, class R, class F> void unaryLoop(const T *x, R *y, int64_t n, F f, int64_t cost = 1) {
  parallelFor(n, cost, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
}

// Kernel families, registered by registerElementwiseKernels().
void registerUnaryKernels();
void registerBinaryKernels();
void registerMiscKernels(); // Cast, CastLike, Where, Clip, Identity, Dropout

} // namespace megac::cpu::elementwise
