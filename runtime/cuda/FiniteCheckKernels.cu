// A grid-stride pass, 4-wide where the gradient is 16-byte aligned (slot
// layouts align every parameter to 256 bytes). Atomics only where a value is
// not finite, so a clean pass is a plain read of the gradients.
#include "runtime/cuda/FiniteCheckKernels.h"

#include "runtime/cuda/GpuKernel.h"

#include <algorithm>

namespace megac::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void mark(int64_t i, unsigned long long tag, unsigned long long *firstBad, int *poison) {
  atomicMin(firstBad, tag | static_cast<unsigned long long>(i));
  *poison = 1;
}

__global__ void findNonFiniteVec4(const float4 *__restrict__ g, int64_t n4, unsigned long long tag,
                                  unsigned long long *firstBad, int *poison) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    const float4 x = g[i];
    // x - x is 0 for a finite x and NaN for NaN or Inf: one test for all four.
    if (((x.x - x.x) + (x.y - x.y) + (x.z - x.z) + (x.w - x.w)) == 0.0f) continue;
    if (!isfinite(x.x)) mark(4 * i, tag, firstBad, poison);
    if (!isfinite(x.y)) mark(4 * i + 1, tag, firstBad, poison);
    if (!isfinite(x.z)) mark(4 * i + 2, tag, firstBad, poison);
    if (!isfinite(x.w)) mark(4 * i + 3, tag, firstBad, poison);
  }
}

__global__ void findNonFiniteScalar(const float *__restrict__ g, int64_t begin, int64_t n, unsigned long long tag,
                                    unsigned long long *firstBad, int *poison) {
  for (int64_t i = begin + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    if (!isfinite(g[i])) mark(i, tag, firstBad, poison);
}

int blocksFor(int64_t n) { return int(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 2048)); }

} // namespace

cudaError_t launchFindNonFinite(const float *grad, int64_t n, unsigned long long tag, unsigned long long *firstBad,
                                int *poison, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  int64_t head = 0;
  if (aligned16(grad)) {
    const int64_t n4 = n / 4;
    if (n4 > 0)
      findNonFiniteVec4<<<blocksFor(n4), kThreads, 0, stream>>>(reinterpret_cast<const float4 *>(grad), n4, tag,
                                                                 firstBad, poison);
    head = 4 * n4;
  }
  if (head < n) findNonFiniteScalar<<<blocksFor(n - head), kThreads, 0, stream>>>(grad, head, n, tag, firstBad, poison);
  return cudaGetLastError();
}

} // namespace megac::cuda
