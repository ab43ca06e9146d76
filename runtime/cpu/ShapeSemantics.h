#pragma once
// ONNX index arithmetic shared by the shape ops' type inference (ir/ops)
// and their CPU kernels, so both read starts, pads, ranges the same way.
// Errors are plain messages; callers prefix the node or op.
#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"

#include <vector>

namespace megac::cpu {

// One data axis of a Slice: the first index read, the step, and how many.
struct SliceDim {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};

// ONNX Slice (opset 10+): starts/ends per listed axis (axes empty: 0..n-1;
// negative axes count from the back), steps empty: all 1. Starts and ends
// are clamped as the spec says, so out-of-range values are fine.
// Returns one SliceDim per data axis (unlisted axes are taken whole).
llvm::Expected<std::vector<SliceDim>> resolveSlice(const Shape &data, const std::vector<int64_t> &starts,
                                                   const std::vector<int64_t> &ends,
                                                   const std::vector<int64_t> &axes,
                                                   const std::vector<int64_t> &steps);

// ONNX Pad: `pads` is [x1_begin, x2_begin, ..., x1_end, x2_end, ...] over
// `axes` (empty: every axis). Returns 2*rank entries in the same layout.
llvm::Expected<std::vector<int64_t>> resolvePads(int64_t rank, const std::vector<int64_t> &pads,
                                                 const std::vector<int64_t> &axes);

// ONNX Range: the number of elements of Range(start, limit, delta) for
// scalar tensors of one numeric dtype (error when delta is 0).
llvm::Expected<int64_t> rangeCount(const Tensor &start, const Tensor &limit, const Tensor &delta);

// Normalizes a possibly negative axis into [0, rank); error when outside.
llvm::Expected<int64_t> normalizeAxisIn(int64_t axis, int64_t rank);

} // namespace megac::cpu
