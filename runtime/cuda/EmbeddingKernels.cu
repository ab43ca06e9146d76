// Gather, GatherElements and megac.GatherGrad with the CPU kernels'
// semantics (runtime/cpu/GatherScatterKernels.cpp, TrainingKernels.cpp):
// any axis (negative counts from the end), int64 or int32 indices, negative
// indices counting from the end of the gathered dim.
//
// Out-of-range indices: the CPU kernels return an error; a GPU kernel cannot,
// so here they only stay memory safe: Gather and GatherElements write zeros
// for an out-of-range index, GatherGrad skips its contribution.
//
// Gather copies whole rows (the dims after the axis) in the widest unit
// (16, 8, 4, 2 or 1 bytes) that divides the row and the pointers' alignment,
// so any dtype works; an embedding lookup is a coalesced 16-byte copy.
// GatherGrad zeroes the table and scatter-adds dY with fp32 atomics (rows
// gathered several times are summed in an unspecified order).
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuKernel.h"

#include <cstdint>

namespace megac::cuda {

namespace {

llvm::Expected<int64_t> normalizeAxis(llvm::StringRef op, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return gpuKernelError(op, "axis " + llvm::Twine(axis) + " is out of range for rank " + llvm::Twine(rank));
  return axis < 0 ? axis + rank : axis;
}

llvm::Error requireIndexType(llvm::StringRef op, const DeviceTensor &indices) {
  if (indices.dtype == DType::I64 || indices.dtype == DType::I32) return llvm::Error::success();
  return gpuKernelError(op, llvm::Twine("indices of type ") + dtypeName(indices.dtype) +
                                " are not supported on the GPU (int64 or int32)");
}

int64_t dimsProduct(const Shape &s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t d = b; d < e; ++d) p *= s[d];
  return p;
}

// k normalized into [0, n), or -1 when out of range.
template <class Id> __device__ __forceinline__ int64_t resolveIndex(Id raw, int64_t n) {
  int64_t k = int64_t(raw);
  if (k < 0) k += n;
  return k >= 0 && k < n ? k : -1;
}

// --- Gather ---

// out[o, j, :] = data[o, idx[j], :], rows of rowUnits units U.
template <class U, class Id>
__global__ void gatherRows(const U *__restrict__ data, const Id *__restrict__ idx, U *__restrict__ out, int64_t total,
                           int64_t nIdx, int64_t rowUnits, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t u = i % rowUnits, r = i / rowUnits, j = r % nIdx, o = r / nIdx;
    const int64_t k = resolveIndex(idx[j], n);
    out[i] = k >= 0 ? data[(o * n + k) * rowUnits + u] : U{};
  }
}

template <class U, class Id>
llvm::Error launchGather(const void *data, const void *idx, void *out, int64_t outer, int64_t nIdx, int64_t rowBytes,
                         int64_t n, cudaStream_t stream) {
  const int64_t rowUnits = rowBytes / int64_t(sizeof(U)), total = outer * nIdx * rowUnits;
  gatherRows<U, Id><<<gridFor(total), 256, 0, stream>>>(static_cast<const U *>(data), static_cast<const Id *>(idx),
                                                        static_cast<U *>(out), total, nIdx, rowUnits, n);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

// The widest copy unit dividing the row size and both pointers' alignment.
int copyUnit(int64_t rowBytes, const void *a, const void *b) {
  const uintptr_t bits = uintptr_t(a) | uintptr_t(b);
  for (int unit : {16, 8, 4, 2})
    if (rowBytes % unit == 0 && bits % unsigned(unit) == 0) return unit;
  return 1;
}

template <class Id>
llvm::Error gatherByUnit(int unit, const void *data, const void *idx, void *out, int64_t outer, int64_t nIdx,
                         int64_t rowBytes, int64_t n, cudaStream_t stream) {
  switch (unit) {
  case 16: return launchGather<uint4, Id>(data, idx, out, outer, nIdx, rowBytes, n, stream);
  case 8: return launchGather<uint64_t, Id>(data, idx, out, outer, nIdx, rowBytes, n, stream);
  case 4: return launchGather<uint32_t, Id>(data, idx, out, outer, nIdx, rowBytes, n, stream);
  case 2: return launchGather<uint16_t, Id>(data, idx, out, outer, nIdx, rowBytes, n, stream);
  default: return launchGather<uint8_t, Id>(data, idx, out, outer, nIdx, rowBytes, n, stream);
  }
}

llvm::Error gatherKernel(GpuKernelContext &ctx) {
  const char *op = "Gather";
  const DeviceTensor *data = ctx.input(0), *indices = ctx.input(1), *out = ctx.output(0);
  if (!data || !indices || !out) return gpuKernelError(op, "needs data, indices and an output");
  if (auto e = requireIndexType(op, *indices)) return e;
  const int64_t rank = int64_t(data->shape.size());
  auto axis = normalizeAxis(op, ctx.attrs.getInt("axis", 0), rank);
  if (!axis) return axis.takeError();
  const int64_t n = data->shape[size_t(*axis)], nIdx = indices->numel();
  const int64_t outer = dimsProduct(data->shape, 0, size_t(*axis));
  const int64_t rowBytes = dimsProduct(data->shape, size_t(*axis) + 1, size_t(rank)) * int64_t(dtypeSize(data->dtype));
  if (out->dtype != data->dtype || int64_t(out->nbytes()) != outer * nIdx * rowBytes)
    return gpuKernelError(op, "output shape does not match data and indices");
  if (outer * nIdx * rowBytes == 0) return llvm::Error::success();
  const int unit = copyUnit(rowBytes, data->data, out->data);
  if (indices->dtype == DType::I32)
    return gatherByUnit<int32_t>(unit, data->data, indices->data, out->data, outer, nIdx, rowBytes, n, ctx.gpu.stream);
  return gatherByUnit<int64_t>(unit, data->data, indices->data, out->data, outer, nIdx, rowBytes, n, ctx.gpu.stream);
}

// --- GatherElements ---

constexpr int kMaxRank = 8;

struct ElementsIndex {
  int rank = 0, axis = 0;
  int64_t axisDim = 0;
  int64_t dims[kMaxRank] = {};        // indices' (= output's) dims
  int64_t dataStrides[kMaxRank] = {}; // data's row-major strides
};

// out[i] = data[coords of i, with the axis coordinate replaced by idx[i]].
template <class U, class Id>
__global__ void gatherElements(const U *__restrict__ data, const Id *__restrict__ idx, U *__restrict__ out, int64_t n,
                               ElementsIndex e) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = resolveIndex(idx[i], e.axisDim);
    if (k < 0) {
      out[i] = U{};
      continue;
    }
    int64_t rest = i, off = 0;
    for (int d = e.rank - 1; d >= 0; --d) {
      const int64_t c = rest % e.dims[d];
      rest /= e.dims[d];
      off += (d == e.axis ? k : c) * e.dataStrides[d];
    }
    out[i] = data[off];
  }
}

template <class U>
llvm::Error launchGatherElements(const DeviceTensor &data, const DeviceTensor &indices, const DeviceTensor &out,
                                 const ElementsIndex &e, cudaStream_t stream) {
  const int64_t n = out.numel();
  const U *src = data.as<U>();
  U *dst = out.as<U>();
  if (indices.dtype == DType::I32)
    gatherElements<U, int32_t><<<gridFor(n), 256, 0, stream>>>(src, indices.as<int32_t>(), dst, n, e);
  else gatherElements<U, int64_t><<<gridFor(n), 256, 0, stream>>>(src, indices.as<int64_t>(), dst, n, e);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

llvm::Error gatherElementsKernel(GpuKernelContext &ctx) {
  const char *op = "GatherElements";
  const DeviceTensor *data = ctx.input(0), *indices = ctx.input(1), *out = ctx.output(0);
  if (!data || !indices || !out) return gpuKernelError(op, "needs data, indices and an output");
  if (auto e = requireIndexType(op, *indices)) return e;
  const int64_t rank = int64_t(data->shape.size());
  auto axis = normalizeAxis(op, ctx.attrs.getInt("axis", 0), rank);
  if (!axis) return axis.takeError();
  if (int64_t(indices->shape.size()) != rank || out->shape != indices->shape || out->dtype != data->dtype)
    return gpuKernelError(op, "indices must have the data's rank and the output's shape");
  if (rank > kMaxRank) return gpuKernelError(op, "rank above 8 is not supported on the GPU");
  ElementsIndex e;
  e.rank = int(rank);
  e.axis = int(*axis);
  e.axisDim = data->shape[size_t(*axis)];
  std::vector<int64_t> strides = rowMajorStrides(data->shape);
  for (int64_t d = 0; d < rank; ++d) {
    if (d != *axis && indices->shape[size_t(d)] > data->shape[size_t(d)])
      return gpuKernelError(op, "indices dim " + llvm::Twine(d) + " exceeds the data's");
    e.dims[d] = indices->shape[size_t(d)];
    e.dataStrides[d] = strides[size_t(d)];
  }
  if (out->numel() == 0) return llvm::Error::success();
  cudaStream_t stream = ctx.gpu.stream;
  switch (dtypeSize(data->dtype)) {
  case 1: return launchGatherElements<uint8_t>(*data, *indices, *out, e, stream);
  case 2: return launchGatherElements<uint16_t>(*data, *indices, *out, e, stream);
  case 4: return launchGatherElements<uint32_t>(*data, *indices, *out, e, stream);
  case 8: return launchGatherElements<uint64_t>(*data, *indices, *out, e, stream);
  default: return gpuKernelError(op, llvm::Twine("unsupported element type ") + dtypeName(data->dtype) + " on the GPU");
  }
}

// --- megac.GatherGrad ---

// out[a, idx[j], :] += dy[a, j, :]
template <class Id>
__global__ void gatherGradKernel(const float *__restrict__ dy, const Id *__restrict__ idx, float *__restrict__ out,
                                 int64_t total, int64_t k, int64_t inner, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % inner, r = i / inner, j = r % k, a = r / k;
    const int64_t row = resolveIndex(idx[j], n);
    if (row >= 0) atomicAdd(out + (a * n + row) * inner + c, dy[i]);
  }
}

llvm::Error gatherGrad(GpuKernelContext &ctx) {
  const char *op = "megac.GatherGrad";
  const DeviceTensor *dy = ctx.input(0), *indices = ctx.input(1), *out = ctx.output(0);
  if (!dy || !indices || !out) return gpuKernelError(op, "needs dY, indices and an output");
  if (auto e = requireIndexType(op, *indices)) return e;
  if (dy->dtype != DType::F32 || out->dtype != DType::F32)
    return gpuKernelError(op, llvm::Twine("unsupported element type ") + dtypeName(dy->dtype) + " on the GPU");
  const int64_t rank = int64_t(out->shape.size());
  auto axis = normalizeAxis(op, ctx.attrs.getInt("axis", 0), rank);
  if (!axis) return axis.takeError();
  const int64_t n = out->shape[size_t(*axis)], k = indices->numel();
  const int64_t outer = dimsProduct(out->shape, 0, size_t(*axis)),
                inner = dimsProduct(out->shape, size_t(*axis) + 1, size_t(rank));
  if (dy->numel() != outer * k * inner)
    return gpuKernelError(op, "dY " + shapeToString(dy->shape) + " does not match the gradient " +
                                  shapeToString(out->shape) + " and " + llvm::Twine(k) + " indices");
  cudaStream_t stream = ctx.gpu.stream;
  if (out->nbytes()) MEGAC_CUDA_TRY(cudaMemsetAsync(out->data, 0, out->nbytes(), stream));
  const int64_t total = dy->numel();
  if (total == 0) return llvm::Error::success();
  if (indices->dtype == DType::I32)
    gatherGradKernel<int32_t><<<gridFor(total), 256, 0, stream>>>(dy->as<float>(), indices->as<int32_t>(),
                                                                  out->as<float>(), total, k, inner, n);
  else
    gatherGradKernel<int64_t><<<gridFor(total), 256, 0, stream>>>(dy->as<float>(), indices->as<int64_t>(),
                                                                  out->as<float>(), total, k, inner, n);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

} // namespace

void registerEmbeddingGpuKernels() {
  registerGpuKernel("Gather", gatherKernel);
  registerGpuKernel("GatherElements", gatherElementsKernel);
  registerGpuKernel("megac.GatherGrad", gatherGrad);
}

} // namespace megac::cuda
