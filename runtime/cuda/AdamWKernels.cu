// Grid-stride loop, 4-wide where all four arrays are 16-byte aligned (slot
// layouts align every parameter to 256 bytes), with a scalar tail. The
// _rn intrinsics keep nvcc from contracting or approximating anything:
// the multiplies stay apart from the fused multiply-adds, exactly as the
// host's std::fma arithmetic.
#include "runtime/cuda/AdamWKernels.h"
#include "runtime/cuda/GpuKernel.h"

#include <algorithm>
#include <cstdint>

namespace megac::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void one(float &p, float grad, float &m, float &v, const runtime::AdamWCoefficients &k) {
  const float g = __fmul_rn(grad, k.gradScale);
  const float mi = __fmaf_rn(k.b1, m, __fmul_rn(k.c1, g));
  const float vi = __fmaf_rn(k.b2, v, __fmul_rn(k.c2, __fmul_rn(g, g)));
  const float den = __fmaf_rn(__fsqrt_rn(vi), k.invBc2Sqrt, k.eps);
  m = mi;
  v = vi;
  p = __fmaf_rn(-k.stepSize, __fdiv_rn(mi, den), __fmul_rn(p, k.decay));
}

__global__ void adamwVec4(float4 *__restrict__ param, const float4 *__restrict__ grad, float4 *__restrict__ m,
                          float4 *__restrict__ v, int64_t n4, runtime::AdamWCoefficients k, const int *poison) {
  if (poison && *poison) return;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    float4 p = param[i], g = grad[i], mi = m[i], vi = v[i];
    one(p.x, g.x, mi.x, vi.x, k);
    one(p.y, g.y, mi.y, vi.y, k);
    one(p.z, g.z, mi.z, vi.z, k);
    one(p.w, g.w, mi.w, vi.w, k);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

__global__ void adamwScalar(float *__restrict__ param, const float *__restrict__ grad, float *__restrict__ m,
                            float *__restrict__ v, int64_t n, runtime::AdamWCoefficients k, const int *poison) {
  if (poison && *poison) return;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    one(param[i], grad[i], m[i], v[i], k);
}

int blocksFor(int64_t n) { return int(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 4096)); }

} // namespace

cudaError_t launchAdamW(float *param, const float *grad, float *m, float *v, int64_t n,
                        const runtime::AdamWCoefficients &k, cudaStream_t stream, const int *poison) {
  if (n <= 0) return cudaSuccess;
  int64_t head = 0;
  if (aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v)) {
    const int64_t n4 = n / 4;
    if (n4 > 0)
      adamwVec4<<<blocksFor(n4), kThreads, 0, stream>>>(reinterpret_cast<float4 *>(param),
                                                         reinterpret_cast<const float4 *>(grad),
                                                         reinterpret_cast<float4 *>(m), reinterpret_cast<float4 *>(v),
                                                         n4, k, poison);
    head = 4 * n4;
  }
  if (head < n)
    adamwScalar<<<blocksFor(n - head), kThreads, 0, stream>>>(param + head, grad + head, m + head, v + head, n - head,
                                                              k, poison);
  return cudaGetLastError();
}

} // namespace megac::cuda
