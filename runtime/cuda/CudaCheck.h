#pragma once
// CUDA and cuBLASLt status codes as llvm::Error, naming the call that failed.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "llvm/Support/Error.h"

namespace megac::cuda {

llvm::Error cudaFailure(cudaError_t e, const char *call);
llvm::Error cublasFailure(cublasStatus_t s, const char *call);

} // namespace megac::cuda

#define MEGAC_CUDA_TRY(call)                                                                                     \
  do {                                                                                                           \
    cudaError_t megac_e_ = (call);                                                                               \
    if (megac_e_ != cudaSuccess) return ::megac::cuda::cudaFailure(megac_e_, #call);                             \
  } while (0)

#define MEGAC_CUBLAS_TRY(call)                                                                                   \
  do {                                                                                                           \
    cublasStatus_t megac_s_ = (call);                                                                            \
    if (megac_s_ != CUBLAS_STATUS_SUCCESS) return ::megac::cuda::cublasFailure(megac_s_, #call);                 \
  } while (0)

// After a kernel launch: a launch error (bad configuration) as llvm::Error.
#define MEGAC_CUDA_LAUNCHED() MEGAC_CUDA_TRY(cudaGetLastError())
