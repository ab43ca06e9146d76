#pragma once
// The rows a chunk of megac.LinearCrossEntropy[Grad] takes: a rule of the
// op's semantics that the CPU and CUDA kernels and the plan's workspace
// budget (runtime/plan/StreamLayout.h) all follow.
#include <algorithm>
#include <cstdint>

namespace megac::cpu {

// megac.LinearCrossEntropy[Grad] compute the logits a chunk of rows at a
// time: kLinearCrossEntropyChunkBytes of fp32 logits, but at least
// kLinearCrossEntropyMinChunkRows rows where those stay under
// kLinearCrossEntropyMaxChunkBytes (at least one row); or `requested` rows
// (the op's chunk_rows attribute) when positive. The floor is for the
// gradient: each chunk adds its h^T dl into the fp32 [hidden, vocab] dW,
// reading and writing all of it, 8 bytes per element for 2 x rows flops:
// under about 700 rows (the H200's GEMM rate over its memory bandwidth,
// times 4) that traffic, not the product, sets the time. A 128256-token
// vocabulary at 64 MiB took 130 rows per chunk.
inline constexpr int64_t kLinearCrossEntropyChunkBytes = int64_t(64) << 20;
inline constexpr int64_t kLinearCrossEntropyMinChunkRows = 1024;
inline constexpr int64_t kLinearCrossEntropyMaxChunkBytes = int64_t(1) << 30;
inline int64_t linearCrossEntropyChunkRows(int64_t rows, int64_t vocab, int64_t requested = 0) {
  const int64_t rowBytes = 4 * std::max<int64_t>(vocab, 1);
  int64_t c = requested > 0 ? requested
                            : std::max(kLinearCrossEntropyChunkBytes / rowBytes,
                                       std::min(kLinearCrossEntropyMinChunkRows, kLinearCrossEntropyMaxChunkBytes / rowBytes));
  return std::max<int64_t>(1, std::min(c, rows));
}
} // namespace megac::cpu
