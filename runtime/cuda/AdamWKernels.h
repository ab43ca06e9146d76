#pragma once
// AdamW on the GPU, for resident units (codegen/ResidentPolicy.h): the host's
// arithmetic (runtime/train/AdamW.h, AdamWCoefficients) with every operation
// rounded as the host rounds it, so a unit steps to the same bits on either.
#include "runtime/train/AdamW.h"

#include <cuda_runtime.h>

namespace megac::cuda {

// One step over n elements of one parameter, on `stream`. Where `poison` is
// given and holds nonzero when the kernel runs (a gradient of this step held
// NaN or Inf: FiniteCheckKernels.h), nothing is updated.
cudaError_t launchAdamW(float *param, const float *grad, float *m, float *v, int64_t n,
                        const runtime::AdamWCoefficients &k, cudaStream_t stream, const int *poison = nullptr);

} // namespace megac::cuda
