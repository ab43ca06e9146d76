#pragma once
// Shared by the shape-family kernel files (ShapeKernels.cpp registers them all).
#include "runtime/cpu/Kernel.h"

#include <cstring>

namespace megac::cpu {

// Copies a strided view of `src` into the dense row-major `dst` of shape
// `outShape`: dst at multi-index i is src at sum(i[d] * srcStrides[d])
// elements (strides may be 0 for broadcast or negative for reversed views).
void copyStrided(void *dst, const void *src, const Shape &outShape, const std::vector<int64_t> &srcStrides,
                 size_t elemSize);

// An error unless inputs 0..n-1 are present and there is at least one output.
inline llvm::Error requireInputs(llvm::StringRef op, const KernelContext &ctx, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!ctx.input(i)) return kernelError(op, "input " + llvm::Twine(i) + " is required");
  if (ctx.outputs.empty()) return kernelError(op, "no output");
  return llvm::Error::success();
}

// The values of an optional integer input; `dflt` when omitted.
std::vector<int64_t> intsOrDefault(const Tensor *t, std::vector<int64_t> dflt = {});

// Checks that indices in `idx` lie in [-dim, dim) and makes them non-negative.
llvm::Error normalizeIndices(llvm::StringRef op, std::vector<int64_t> &idx, int64_t dim, llvm::StringRef what);

// Element arithmetic over a dtype's storage: load() to a compute type,
// store() back (f16/bf16 compute in float and round on every store).
template <class S, class C = S> struct Arith {
  using Storage = S;
  using Compute = C;
  static C load(S v) { return C(v); }
  static S store(C v) { return S(v); }
};
struct HalfArith {
  using Storage = uint16_t;
  using Compute = float;
  static float load(uint16_t v) { return halfToFloat(v); }
  static uint16_t store(float v) { return floatToHalf(v); }
};
struct Bf16Arith {
  using Storage = uint16_t;
  using Compute = float;
  static float load(uint16_t v) { return bf16ToFloat(v); }
  static uint16_t store(float v) { return floatToBf16(v); }
};
// Bool as 0/1: + is "or", * is "and".
struct BoolArith {
  using Storage = uint8_t;
  using Compute = bool;
  static bool load(uint8_t v) { return v != 0; }
  static uint8_t store(bool v) { return v ? 1 : 0; }
};

// Calls f(ArithTag{}) for the numeric dtype `dt`; false if dt is not numeric.
template <class F> bool dispatchArith(DType dt, F &&f) {
  switch (dt) {
  case DType::F32: f(Arith<float>{}); return true;
  case DType::F64: f(Arith<double>{}); return true;
  case DType::F16: f(HalfArith{}); return true;
  case DType::BF16: f(Bf16Arith{}); return true;
  case DType::I8: f(Arith<int8_t>{}); return true;
  case DType::I16: f(Arith<int16_t>{}); return true;
  case DType::I32: f(Arith<int32_t>{}); return true;
  case DType::I64: f(Arith<int64_t>{}); return true;
  case DType::U8: f(Arith<uint8_t>{}); return true;
  case DType::U16: f(Arith<uint16_t>{}); return true;
  case DType::U32: f(Arith<uint32_t>{}); return true;
  case DType::U64: f(Arith<uint64_t>{}); return true;
  case DType::Bool: f(BoolArith{}); return true;
  default: return false;
  }
}

// Copies one element of `es` bytes.
inline void copyElement(void *dst, const void *src, size_t es) {
  switch (es) {
  case 1: *static_cast<uint8_t *>(dst) = *static_cast<const uint8_t *>(src); return;
  case 2: *static_cast<uint16_t *>(dst) = *static_cast<const uint16_t *>(src); return;
  case 4: *static_cast<uint32_t *>(dst) = *static_cast<const uint32_t *>(src); return;
  case 8: *static_cast<uint64_t *>(dst) = *static_cast<const uint64_t *>(src); return;
  default: std::memcpy(dst, src, es);
  }
}

// Product of s[b..e).
inline int64_t dimsProduct(const Shape &s, int64_t b, int64_t e) {
  int64_t p = 1;
  for (int64_t d = b; d < e; ++d) p *= s[size_t(d)];
  return p;
}

void registerGatherScatterKernels();
void registerGeneratorKernels();

} // namespace megac::cpu
