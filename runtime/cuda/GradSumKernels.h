#pragma once
// Layer-major accumulation (StreamSchedule.micro_batches): a unit's later
// micro-batches add their parameter gradients to the sum in its grad slot,
// in micro-batch order, as the host's accumulation over passes adds them.
#include <cuda_runtime.h>

#include <cstdint>

namespace megac::cuda {

// dst[i] += src[i] over n floats (fp32, one rounding each, as the host's `+=`).
cudaError_t launchAddInto(float *dst, const float *src, int64_t n, cudaStream_t stream);

} // namespace megac::cuda
