#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuKernel.h"

#include "llvm/ADT/StringMap.h"

namespace megac::cuda {

llvm::Error cudaFailure(cudaError_t e, const char *call) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 std::string("CUDA error in ") + call + ": " + cudaGetErrorName(e) + " (" +
                                     cudaGetErrorString(e) + ")");
}

llvm::Error cublasFailure(cublasStatus_t s, const char *call) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 std::string("cuBLAS error in ") + call + ": status " + std::to_string(int(s)));
}

llvm::Expected<ComputeMode> parseComputeMode(llvm::StringRef s) {
  if (s == "bf16") return ComputeMode::BF16;
  if (s == "tf32") return ComputeMode::TF32;
  if (s == "fp32") return ComputeMode::FP32;
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "unknown compute mode '" + s.str() + "' (expected bf16, tf32 or fp32)");
}

const char *computeModeName(ComputeMode m) {
  switch (m) {
  case ComputeMode::BF16: return "bf16";
  case ComputeMode::TF32: return "tf32";
  case ComputeMode::FP32: return "fp32";
  }
  return "?";
}

static llvm::StringMap<GpuKernel> &table() {
  static llvm::StringMap<GpuKernel> t;
  return t;
}

void registerGpuKernel(llvm::StringRef opType, GpuKernelFn fn, GpuWorkspaceFn workspace) {
  table()[opType] = GpuKernel{fn, workspace};
}

void registerSwiGLUGpuKernels(); // SwiGLUKernels.cu (megac.SwiGLU[Grad])

static void registerAll() {
  registerElementwiseGpuKernels();
  registerShapeGpuKernels();
  registerReductionGpuKernels();
  registerSoftmaxGpuKernels();
  registerNormGpuKernels();
  registerRotaryGpuKernels();
  registerSwiGLUGpuKernels();
  registerEmbeddingGpuKernels();
  registerLossGpuKernels();
  registerLinearCrossEntropyGpuKernels();
  registerMatMulGpuKernels();
  registerAttentionGpuKernels();
}

const GpuKernel *lookupGpuKernel(llvm::StringRef opType) {
  static bool once = (registerAll(), true);
  (void)once;
  auto it = table().find(opType);
  return it == table().end() ? nullptr : &it->second;
}

llvm::Error gpuKernelError(llvm::StringRef opType, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), (opType + ": " + msg).str());
}

} // namespace megac::cuda
