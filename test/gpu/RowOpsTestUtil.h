#pragma once
// Helpers of the reduction, softmax, norm, rotary, embedding and loss GPU
// tests: building cases, expecting GPU-only errors, and running a kernel on
// the GPU alone (for inputs where the CPU reports an error but the GPU
// kernel, which cannot fail on data, has a documented fallback).
#include "GpuOpCheck.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace megac::gputest {

inline Attrs makeAttrs(std::initializer_list<std::pair<std::string, Attr>> list) {
  Attrs a;
  for (const auto &[name, value] : list) a.set(name, value);
  return a;
}

inline Tensor int64s(Shape s, std::vector<int64_t> v) {
  return Tensor::fromVector<int64_t>(DType::I64, std::move(s), v);
}
inline Tensor int32s(Shape s, std::vector<int32_t> v) {
  return Tensor::fromVector<int32_t>(DType::I32, std::move(s), v);
}

// The same tensor with another integer dtype (e.g. int64 indices as int32).
inline Tensor convertTo(const Tensor &t, DType dt) {
  Tensor r(dt, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) r.setFromDouble(i, t.getAsDouble(i));
  return r;
}


// Expects the CPU kernel to succeed and the GPU kernel to report an error
// whose message contains `what`.
#define EXPECT_GPU_ERROR(opcase, ctx, what)                                                                            \
  do {                                                                                                                 \
    auto r_ = ::megac::gputest::runOnBoth((opcase), (ctx));                                                            \
    EXPECT_EQ(r_.error.rfind("GPU: ", 0), 0u) << "expected a GPU error, got: '" << r_.error << "'";                    \
    EXPECT_NE(r_.error.find(what), std::string::npos) << r_.error;                                                     \
  } while (0)


} // namespace megac::gputest
