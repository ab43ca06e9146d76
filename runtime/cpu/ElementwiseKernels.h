#pragma once
// Entry points of the elementwise kernels that other code calls directly.
#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"

namespace megac::cpu {

// src converted to dtype `to` with ONNX Cast semantics (float -> int truncates
// toward zero, -> bool is "nonzero"). Strings are not supported.
llvm::Expected<Tensor> castTensor(const Tensor &src, DType to);

} // namespace megac::cpu
