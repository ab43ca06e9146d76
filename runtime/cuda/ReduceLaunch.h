#pragma once
// Host entry points of the reduction kernels (ReductionKernels.cu) for other
// kernel families that need a sum over broadcast dims (e.g. a norm's scale
// gradient when Scale is broadcast within the normalized dims).
#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"

#include <cuda_runtime.h>

namespace megac::cuda {

// Scratch bytes sumToShapeF32 needs for these shapes (0 when none, or when
// the shapes are invalid: sumToShapeF32 then reports the error).
size_t sumToShapeWorkspaceBytes(const Shape &x, const Shape &y);

// y = x summed over the dims along which y's shape (right-aligned, extents
// equal or 1) was broadcast to x's; fp32 accumulation, deterministic order.
// Enqueued on `stream`; `workspace` must hold sumToShapeWorkspaceBytes.
llvm::Error sumToShapeF32(llvm::StringRef op, const float *x, const Shape &xShape, float *y, const Shape &yShape,
                          void *workspace, size_t workspaceBytes, cudaStream_t stream);

} // namespace megac::cuda
