#pragma once
// Vectorized row primitives for softmax-like kernels (AVX-512 / AVX2 chosen
// at run time, portable scalar code otherwise).
#include <cstdint>

namespace megac::cpu {

// The largest of x[0..n), ignoring NaNs; -inf when n == 0 or all are NaN.
float rowMax(const float *x, int64_t n);

// Writes y[i] = exp(x[i] - shift) (unless y is nullptr) and returns the sum
// of those values, accumulated in double. exp is accurate to about 2 ulp
// (results below ~1e-38 flush to 0); -inf gives 0 and NaN gives NaN.
double expShiftedSum(const float *x, float shift, float *y, int64_t n);

} // namespace megac::cpu
