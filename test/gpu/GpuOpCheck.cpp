#include "GpuOpCheck.h"

#include <cstdio>
#include <cstdlib>

namespace megac::gputest {

GpuTestContext::GpuTestContext() {
  cudaStreamCreate(&ctx_.stream);
  cublasLtCreate(&ctx_.lt);
  std::string why;
  if (!cuda::createDnnHandle(ctx_, &why)) std::fprintf(stderr, "GPU tests: no cuDNN handle: %s\n", why.c_str());
  ctx_.gemmWorkspaceBytes = 32 << 20;
  cudaMalloc(&ctx_.gemmWorkspace, ctx_.gemmWorkspaceBytes);
}

GpuTestContext &gpu() {
  static GpuTestContext c;
  return c;
}

GpuTestContext::~GpuTestContext() {
  cudaFree(ctx_.gemmWorkspace);
  cublasLtDestroy(ctx_.lt);
  cuda::destroyDnnHandle(ctx_);
  cudaStreamDestroy(ctx_.stream);
}

static std::string errText(llvm::Error e) { return e ? llvm::toString(std::move(e)) : ""; }

OpResult runOnBoth(const OpCase &c, GpuTestContext &gpu) {
  OpResult r;
  // CPU reference.
  for (auto &[dt, shape] : c.outputs) r.cpu.push_back(dt == DType::Undefined ? Tensor() : Tensor(dt, shape));
  {
    cpu::KernelContext ctx{c.attrs, {}, {}};
    for (const Tensor &t : c.inputs) ctx.inputs.push_back(t.raw() ? &t : nullptr);
    for (Tensor &t : r.cpu) ctx.outputs.push_back(&t);
    r.error = errText(cpu::runKernel(c.op, ctx));
    if (!r.error.empty()) {
      r.error = "CPU: " + r.error;
      return r;
    }
  }
  GpuOnlyResult g = runGpuOnly(c, gpu);
  if (!g.error.empty()) {
    r.error = "GPU: " + g.error;
    return r;
  }
  r.gpu = g.outputs;
  for (size_t o = 0; o < r.gpu.size(); ++o) {
    const Tensor &t = r.gpu[o];
    if (!t.raw()) continue;
    for (int64_t i = 0; i < t.numel(); ++i) {
      double x = r.cpu[o].getAsDouble(i), y = t.getAsDouble(i);
      double e = (std::isnan(x) && std::isnan(y)) || x == y ? 0 : std::fabs(x - y) / (1 + std::fabs(x));
      if (!(e <= r.maxRelError)) r.maxRelError = std::isnan(e) ? INFINITY : e;
    }
  }
  return r;
}

GpuOnlyResult runGpuOnly(const OpCase &c, GpuTestContext &gpu) {
  GpuOnlyResult r;
  const cuda::GpuKernel *k = cuda::lookupGpuKernel(c.op);
  if (!k) {
    r.error = "no CUDA kernel for " + c.op;
    return r;
  }
  std::vector<void *> allocations;
  auto alloc = [&](size_t bytes) {
    void *p = nullptr;
    cudaMalloc(&p, bytes ? bytes : 1);
    allocations.push_back(p);
    return p;
  };
  std::vector<cuda::DeviceTensor> ins(c.inputs.size()), outs(c.outputs.size());
  cuda::GpuKernelContext ctx{c.attrs, gpu.get(), {}, {}, {}};
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor &t = c.inputs[i];
    if (!t.raw()) {
      ctx.inputs.push_back(nullptr);
      ctx.constants.push_back(nullptr);
      continue;
    }
    ins[i] = {alloc(t.nbytes()), t.dtype(), t.shape()};
    cudaMemcpy(ins[i].data, t.raw(), t.nbytes(), cudaMemcpyHostToDevice);
    ctx.inputs.push_back(&ins[i]);
    ctx.constants.push_back(i < c.constant.size() && c.constant[i] ? &t : nullptr);
  }
  for (size_t o = 0; o < c.outputs.size(); ++o) {
    auto &[dt, shape] = c.outputs[o];
    if (dt == DType::Undefined) {
      ctx.outputs.push_back(nullptr);
      continue;
    }
    outs[o] = {alloc(size_t(numElements(shape)) * dtypeSize(dt)), dt, shape};
    // Poison the outputs so a kernel that skips elements is caught.
    cudaMemset(outs[o].data, 0xff, outs[o].nbytes());
    ctx.outputs.push_back(&outs[o]);
  }
  gpu.get().mode = c.mode;
  if (k->workspace) {
    ctx.workspaceBytes = k->workspace(ctx);
    ctx.workspace = alloc(ctx.workspaceBytes);
  }
  r.error = errText(k->run(ctx));
  cudaError_t sync = cudaStreamSynchronize(gpu.get().stream);
  if (r.error.empty() && sync != cudaSuccess) r.error = std::string("CUDA: ") + cudaGetErrorString(sync);
  for (size_t o = 0; o < c.outputs.size() && r.error.empty(); ++o) {
    if (!ctx.outputs[o]) {
      r.outputs.emplace_back();
      continue;
    }
    Tensor t(outs[o].dtype, outs[o].shape);
    cudaMemcpy(t.raw(), outs[o].data, t.nbytes(), cudaMemcpyDeviceToHost);
    r.outputs.push_back(t);
  }
  for (void *p : allocations) cudaFree(p);
  return r;
}

} // namespace megac::gputest
