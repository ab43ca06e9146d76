#pragma once
// Reading and writing runs of tensor elements as float or double, whatever
// the tensor's dtype: lets a kernel compute in one precision and accept f16,
// bf16, f32 and f64 tensors. The dtype switch sits outside the element loop.
#include "runtime/core/Tensor.h"

#include <vector>

namespace megac::cpu {

// out[i] = t[offset + i] for i < n.
template <class C> void readElements(const Tensor &t, int64_t offset, int64_t n, C *out) {
  switch (t.dtype()) {
  case DType::F32: {
    const float *p = t.data<float>() + offset;
    for (int64_t i = 0; i < n; ++i) out[i] = C(p[i]);
    break;
  }
  case DType::F64: {
    const double *p = t.data<double>() + offset;
    for (int64_t i = 0; i < n; ++i) out[i] = C(p[i]);
    break;
  }
  case DType::F16: {
    const uint16_t *p = t.data<uint16_t>() + offset;
    for (int64_t i = 0; i < n; ++i) out[i] = C(halfToFloat(p[i]));
    break;
  }
  case DType::BF16: {
    const uint16_t *p = t.data<uint16_t>() + offset;
    for (int64_t i = 0; i < n; ++i) out[i] = C(bf16ToFloat(p[i]));
    break;
  }
  default:
    for (int64_t i = 0; i < n; ++i) out[i] = C(t.getAsDouble(offset + i));
  }
}

// t[offset + i] = in[i] for i < n, rounded to t's dtype.
template <class C> void writeElements(Tensor &t, int64_t offset, int64_t n, const C *in) {
  switch (t.dtype()) {
  case DType::F32: {
    float *p = t.data<float>() + offset;
    for (int64_t i = 0; i < n; ++i) p[i] = float(in[i]);
    break;
  }
  case DType::F64: {
    double *p = t.data<double>() + offset;
    for (int64_t i = 0; i < n; ++i) p[i] = double(in[i]);
    break;
  }
  case DType::F16: {
    uint16_t *p = t.data<uint16_t>() + offset;
    for (int64_t i = 0; i < n; ++i) p[i] = floatToHalf(float(in[i]));
    break;
  }
  case DType::BF16: {
    uint16_t *p = t.data<uint16_t>() + offset;
    for (int64_t i = 0; i < n; ++i) p[i] = floatToBf16(float(in[i]));
    break;
  }
  default:
    for (int64_t i = 0; i < n; ++i) t.setFromDouble(offset + i, double(in[i]));
  }
}

template <class C> std::vector<C> readAll(const Tensor &t) {
  std::vector<C> v(size_t(t.numel()));
  readElements(t, 0, t.numel(), v.data());
  return v;
}

// Elements of t as a C array: t's own storage when its dtype is C, else a
// converted copy held by the view.
template <class C> class FloatView {
public:
  explicit FloatView(const Tensor &t) {
    if (t.dtype() == dtypeOf()) {
      ptr_ = t.data<C>();
    } else {
      copy_ = readAll<C>(t);
      ptr_ = copy_.data();
    }
  }
  FloatView(const FloatView &) = delete;
  FloatView &operator=(const FloatView &) = delete;
  const C *data() const { return ptr_; }

private:
  static DType dtypeOf() { return sizeof(C) == 4 ? DType::F32 : DType::F64; }
  const C *ptr_ = nullptr;
  std::vector<C> copy_;
};

} // namespace megac::cpu
