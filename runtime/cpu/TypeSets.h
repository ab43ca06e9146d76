#pragma once
// The kinds of dtype an elementwise op is defined for, as compile-time bit
// masks. The CPU kernels dispatch on them (ElementwiseCommon.h); the CUDA
// kernels map them onto the dtypes they are built for (ElementwiseKernels.cu).
// F16/BF16 are not listed: they compute through f32.
namespace megac::cpu::elementwise {

enum TypeSet : unsigned {
  kFloat = 1u,         // f32, f64
  kSignedInt = 2u,     // i8, i16, i32, i64
  kUnsignedInt = 4u,   // u8, u16, u32, u64
  kBool = 8u,
  kInt = kSignedInt | kUnsignedInt,
  kSigned = kFloat | kSignedInt,
  kNumeric = kFloat | kInt,
  kAll = kNumeric | kBool,
};

} // namespace megac::cpu::elementwise
