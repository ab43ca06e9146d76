#include "runtime/core/Tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace megac {

int64_t numElements(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shapeToString(const Shape &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ",";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

std::vector<int64_t> rowMajorStrides(const Shape &s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t i = int64_t(s.size()) - 2; i >= 0; --i) st[size_t(i)] = st[size_t(i + 1)] * s[size_t(i + 1)];
  return st;
}

static std::shared_ptr<uint8_t[]> allocate(size_t bytes) {
  size_t n = (bytes + 63) / 64 * 64;
  if (n == 0) n = 64;
  auto *p = static_cast<uint8_t *>(std::aligned_alloc(64, n));
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, n);
  return std::shared_ptr<uint8_t[]>(p, [](uint8_t *q) { std::free(q); });
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  storage_ = allocate(nbytes());
}

Tensor Tensor::view(DType dtype, Shape shape, void *data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  // The aliasing constructor: an empty owner, so nothing is freed.
  t.storage_ = std::shared_ptr<uint8_t[]>(std::shared_ptr<uint8_t[]>(), static_cast<uint8_t *>(data));
  return t;
}

Tensor Tensor::scalar(float v) {
  Tensor t(DType::F32, {});
  *t.data<float>() = v;
  return t;
}

Tensor Tensor::clone() const {
  if (!storage_) return *this;
  Tensor t(dtype_, shape_);
  std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  assert(numElements(shape) == numel());
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

double Tensor::getAsDouble(int64_t i) const {
  switch (dtype_) {
  case DType::F32: return data<float>()[i];
  case DType::F64: return data<double>()[i];
  case DType::F16: return halfToFloat(data<uint16_t>()[i]);
  case DType::BF16: return bf16ToFloat(data<uint16_t>()[i]);
  case DType::I8: return data<int8_t>()[i];
  case DType::I16: return data<int16_t>()[i];
  case DType::I32: return data<int32_t>()[i];
  case DType::I64: return double(data<int64_t>()[i]);
  case DType::U8: case DType::Bool: return data<uint8_t>()[i];
  case DType::U16: return data<uint16_t>()[i];
  case DType::U32: return data<uint32_t>()[i];
  case DType::U64: return double(data<uint64_t>()[i]);
  default: return 0;
  }
}

int64_t Tensor::getAsInt(int64_t i) const {
  switch (dtype_) {
  case DType::I64: return data<int64_t>()[i];
  case DType::I32: return data<int32_t>()[i];
  case DType::U64: return int64_t(data<uint64_t>()[i]);
  default: return int64_t(getAsDouble(i));
  }
}

// A double into an integer type, saturating (C++ leaves an out-of-range
// conversion undefined; a Clip-6 bound of -1 on uint8 means 0).
template <class T> static T saturate(double v) {
  if (std::isnan(v)) return T(0);
  if (v <= double(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return T(v);
}

void Tensor::setFromDouble(int64_t i, double v) {
  switch (dtype_) {
  case DType::F32: data<float>()[i] = float(v); break;
  case DType::F64: data<double>()[i] = v; break;
  case DType::F16: data<uint16_t>()[i] = floatToHalf(float(v)); break;
  case DType::BF16: data<uint16_t>()[i] = floatToBf16(float(v)); break;
  case DType::I8: data<int8_t>()[i] = saturate<int8_t>(v); break;
  case DType::I16: data<int16_t>()[i] = saturate<int16_t>(v); break;
  case DType::I32: data<int32_t>()[i] = saturate<int32_t>(v); break;
  case DType::I64: data<int64_t>()[i] = saturate<int64_t>(v); break;
  case DType::U8: data<uint8_t>()[i] = saturate<uint8_t>(v); break;
  case DType::Bool: data<uint8_t>()[i] = v != 0; break;
  case DType::U16: data<uint16_t>()[i] = saturate<uint16_t>(v); break;
  case DType::U32: data<uint32_t>()[i] = saturate<uint32_t>(v); break;
  case DType::U64: data<uint64_t>()[i] = saturate<uint64_t>(v); break;
  default: break;
  }
}

std::vector<int64_t> Tensor::toInt64Vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) v[size_t(i)] = getAsInt(i);
  return v;
}

bool Tensor::identical(const Tensor &o) const {
  if (dtype_ != o.dtype_ || shape_ != o.shape_) return false;
  if (!storage_ || !o.storage_) return storage_ == o.storage_;
  return std::memcmp(raw(), o.raw(), nbytes()) == 0;
}

} // namespace megac
