// A grid-stride pass, 4-wide where both arrays are 16-byte aligned (slot
// layouts and the arena align every tensor to 256 bytes).
#include "runtime/cuda/GradSumKernels.h"

#include <algorithm>

namespace megac::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void addIntoVec4(float4 *__restrict__ d, const float4 *__restrict__ s, int64_t n4) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    float4 a = d[i];
    const float4 b = s[i];
    a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
    d[i] = a;
  }
}

__global__ void addIntoScalar(float *__restrict__ d, const float *__restrict__ s, int64_t begin, int64_t n) {
  for (int64_t i = begin + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d[i] += s[i];
}

int blocksFor(int64_t n) { return int(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 4096)); }

} // namespace

cudaError_t launchAddInto(float *dst, const float *src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  int64_t done = 0;
  if (reinterpret_cast<uintptr_t>(dst) % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    const int64_t n4 = n / 4;
    if (n4 > 0)
      addIntoVec4<<<blocksFor(n4), kThreads, 0, stream>>>(reinterpret_cast<float4 *>(dst),
                                                           reinterpret_cast<const float4 *>(src), n4);
    done = 4 * n4;
  }
  if (done < n) addIntoScalar<<<blocksFor(n - done), kThreads, 0, stream>>>(dst, src, done, n);
  return cudaGetLastError();
}

} // namespace megac::cuda
