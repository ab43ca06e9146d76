// megac.SwiGLU(G, U) = G * sigmoid(G) * U and megac.SwiGLUGrad(dY, G, U) ->
// (dG, dU), with the CPU kernels' semantics (runtime/cpu/SwiGLUKernels.cpp):
// equal shapes, no broadcasting. f32 and f64 as the other elementwise
// kernels, and f16/bf16 stored as such but computed in f32. Grid-stride
// loops; f32 tensors whose buffers are 16-byte aligned take 4-wide vector
// loads and stores, with a scalar tail.
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuKernel.h"
#include "runtime/cpu/SwiGLUMath.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace megac::cuda {

namespace {

constexpr int kThreads = 256;

// The arithmetic type of a stored type: f32 for the half types.
template <class T> struct Compute { using type = T; };
template <> struct Compute<__half> { using type = float; };
template <> struct Compute<__nv_bfloat16> { using type = float; };

template <class T> __device__ __forceinline__ typename Compute<T>::type load(const T *p, int64_t i) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(p[i]);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(p[i]);
  else return p[i];
}
template <class T, class C> __device__ __forceinline__ void store(T *p, int64_t i, C v) {
  if constexpr (std::is_same_v<T, __half>) p[i] = __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) p[i] = __float2bfloat16_rn(v);
  else p[i] = v;
}

// The formulas are the CPU's (runtime/cpu/SwiGLUMath.h).
template <class C> __device__ __forceinline__ C swiglu(C g, C u) { return cpu::swigluValue(g, u); }

template <class C> __device__ __forceinline__ void swigluGrad(C dy, C g, C u, C &dg, C &du) {
  C s = cpu::swigluSigmoid(g);
  dg = cpu::swigluGradG(dy, g, u, s);
  du = cpu::swigluGradU(dy, g, s);
}

template <class T>
__global__ void swigluKernel(const T *__restrict__ g, const T *__restrict__ u, T *__restrict__ y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store(y, i, swiglu(load(g, i), load(u, i)));
}

// f32 in groups of 4 (groups = n / 4); the tail is done by the scalar kernel.
__global__ void swigluKernel4(const float4 *__restrict__ g, const float4 *__restrict__ u, float4 *__restrict__ y,
                              int64_t groups) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < groups; i += int64_t(gridDim.x) * blockDim.x) {
    float4 a = g[i], b = u[i];
    y[i] = make_float4(swiglu(a.x, b.x), swiglu(a.y, b.y), swiglu(a.z, b.z), swiglu(a.w, b.w));
  }
}

// dg or du may be null (that gradient is not asked for).
template <class T>
__global__ void swigluGradKernel(const T *__restrict__ dy, const T *__restrict__ g, const T *__restrict__ u,
                                 T *__restrict__ dg, T *__restrict__ du, int64_t n) {
  using C = typename Compute<T>::type;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    C a, b;
    swigluGrad<C>(load(dy, i), load(g, i), load(u, i), a, b);
    if (dg) store(dg, i, a);
    if (du) store(du, i, b);
  }
}

__global__ void swigluGradKernel4(const float4 *__restrict__ dy, const float4 *__restrict__ g,
                                  const float4 *__restrict__ u, float4 *__restrict__ dg, float4 *__restrict__ du,
                                  int64_t groups) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < groups; i += int64_t(gridDim.x) * blockDim.x) {
    float4 d = dy[i], a = g[i], b = u[i], rg, ru;
    swigluGrad(d.x, a.x, b.x, rg.x, ru.x);
    swigluGrad(d.y, a.y, b.y, rg.y, ru.y);
    swigluGrad(d.z, a.z, b.z, rg.z, ru.z);
    swigluGrad(d.w, a.w, b.w, rg.w, ru.w);
    dg[i] = rg;
    du[i] = ru;
  }
}

// Inputs 0..n-1 and the present outputs must share G's dtype and shape.
llvm::Error checkOperands(const char *op, const GpuKernelContext &ctx, size_t n, size_t outs) {
  for (size_t i = 0; i < n; ++i)
    if (!ctx.input(i)) return gpuKernelError(op, "input " + llvm::Twine(i) + " is missing");
  const DeviceTensor &g = *ctx.input(n - 2);
  for (size_t i = 0; i < n; ++i)
    if (ctx.input(i)->shape != g.shape || ctx.input(i)->dtype != g.dtype)
      return gpuKernelError(op, "input " + llvm::Twine(i) + " " + shapeToString(ctx.input(i)->shape) +
                                    " differs from G " + shapeToString(g.shape) + " in shape or dtype");
  bool any = false;
  for (size_t i = 0; i < outs; ++i)
    if (const DeviceTensor *o = ctx.output(i)) {
      any = true;
      if (o->shape != g.shape || o->dtype != g.dtype)
        return gpuKernelError(op, "output " + llvm::Twine(i) + " must have G's shape and dtype");
    }
  if (!any) return gpuKernelError(op, "no output is asked for");
  return llvm::Error::success();
}

llvm::Error unsupported(const char *op, DType t) {
  return gpuKernelError(op, llvm::Twine("element type ") + dtypeName(t) +
                                " is not supported by the CUDA kernel; it takes f32, f64, f16, bf16 tensors");
}

template <class T> void launchSwiGLU(cudaStream_t s, const DeviceTensor &g, const DeviceTensor &u, DeviceTensor &y) {
  const int64_t n = y.numel();
  int64_t done = 0;
  if constexpr (std::is_same_v<T, float>) {
    if (aligned16(g.data) && aligned16(u.data) && aligned16(y.data)) {
      const int64_t groups = n / 4;
      if (groups > 0)
        swigluKernel4<<<gridFor(groups, kThreads), kThreads, 0, s>>>(g.as<float4>(), u.as<float4>(), y.as<float4>(),
                                                                     groups);
      done = groups * 4;
    }
  }
  if (n > done)
    swigluKernel<T><<<gridFor(n - done, kThreads), kThreads, 0, s>>>(g.as<T>() + done, u.as<T>() + done,
                                                                     y.as<T>() + done, n - done);
}

llvm::Error swigluForward(GpuKernelContext &ctx) {
  const char *op = "megac.SwiGLU";
  if (auto e = checkOperands(op, ctx, 2, 1)) return e;
  const DeviceTensor &g = *ctx.input(0), &u = *ctx.input(1);
  DeviceTensor &y = *ctx.output(0);
  if (y.numel() == 0) return llvm::Error::success();
  cudaStream_t s = ctx.gpu.stream;
  switch (g.dtype) {
  case DType::F32: launchSwiGLU<float>(s, g, u, y); break;
  case DType::F64: launchSwiGLU<double>(s, g, u, y); break;
  case DType::F16: launchSwiGLU<__half>(s, g, u, y); break;
  case DType::BF16: launchSwiGLU<__nv_bfloat16>(s, g, u, y); break;
  default: return unsupported(op, g.dtype);
  }
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

template <class T>
void launchSwiGLUGrad(cudaStream_t s, const DeviceTensor &dy, const DeviceTensor &g, const DeviceTensor &u,
                      DeviceTensor *dg, DeviceTensor *du) {
  const int64_t n = g.numel();
  T *pdg = dg ? dg->as<T>() : nullptr, *pdu = du ? du->as<T>() : nullptr;
  int64_t done = 0;
  if constexpr (std::is_same_v<T, float>) {
    if (pdg && pdu && aligned16(dy.data) && aligned16(g.data) && aligned16(u.data) && aligned16(pdg) &&
        aligned16(pdu)) {
      const int64_t groups = n / 4;
      if (groups > 0)
        swigluGradKernel4<<<gridFor(groups, kThreads), kThreads, 0, s>>>(
            dy.as<float4>(), g.as<float4>(), u.as<float4>(), reinterpret_cast<float4 *>(pdg),
            reinterpret_cast<float4 *>(pdu), groups);
      done = groups * 4;
    }
  }
  if (n > done)
    swigluGradKernel<T><<<gridFor(n - done, kThreads), kThreads, 0, s>>>(
        dy.as<T>() + done, g.as<T>() + done, u.as<T>() + done, pdg ? pdg + done : nullptr,
        pdu ? pdu + done : nullptr, n - done);
}

llvm::Error swigluBackward(GpuKernelContext &ctx) {
  const char *op = "megac.SwiGLUGrad";
  if (auto e = checkOperands(op, ctx, 3, 2)) return e;
  const DeviceTensor &dy = *ctx.input(0), &g = *ctx.input(1), &u = *ctx.input(2);
  DeviceTensor *dg = ctx.output(0), *du = ctx.output(1);
  if (g.numel() == 0) return llvm::Error::success();
  cudaStream_t s = ctx.gpu.stream;
  switch (g.dtype) {
  case DType::F32: launchSwiGLUGrad<float>(s, dy, g, u, dg, du); break;
  case DType::F64: launchSwiGLUGrad<double>(s, dy, g, u, dg, du); break;
  case DType::F16: launchSwiGLUGrad<__half>(s, dy, g, u, dg, du); break;
  case DType::BF16: launchSwiGLUGrad<__nv_bfloat16>(s, dy, g, u, dg, du); break;
  default: return unsupported(op, g.dtype);
  }
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

} // namespace

void registerSwiGLUGpuKernels() {
  registerGpuKernel("megac.SwiGLU", swigluForward);
  registerGpuKernel("megac.SwiGLUGrad", swigluBackward);
}

} // namespace megac::cuda
