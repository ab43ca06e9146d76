#pragma once
#include "runtime/core/DType.h"

#include <cassert>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace megac {

using Shape = std::vector<int64_t>;

int64_t numElements(const Shape &s);
std::string shapeToString(const Shape &s); // "[2,16,64]"

// Row-major strides, in elements.
std::vector<int64_t> rowMajorStrides(const Shape &s);

// A dense, row-major tensor on the host. Copies share storage (like a handle);
// use clone() for a deep copy. A default-constructed Tensor has no data.
class Tensor {
public:
  Tensor() = default;
  // Allocates zero-filled storage.
  Tensor(DType dtype, Shape shape);

  template <class T> static Tensor fromVector(DType dtype, Shape shape, const std::vector<T> &v) {
    Tensor t(dtype, std::move(shape));
    assert(sizeof(T) == dtypeSize(dtype) && int64_t(v.size()) == t.numel());
    std::copy(v.begin(), v.end(), t.data<T>());
    return t;
  }
  static Tensor scalar(float v);
  // A tensor over bytes it does not own (a place in a simulated device
  // allocation): the caller keeps `data` alive while any copy of it lives.
  static Tensor view(DType dtype, Shape shape, void *data);

  bool defined() const { return storage_ != nullptr || dtype_ != DType::Undefined; }
  DType dtype() const { return dtype_; }
  const Shape &shape() const { return shape_; }
  int64_t rank() const { return int64_t(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[size_t(i < 0 ? i + rank() : i)]; }
  int64_t numel() const { return numElements(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtypeSize(dtype_); }

  void *raw() { return storage_.get(); }
  const void *raw() const { return storage_.get(); }
  template <class T> T *data() { return static_cast<T *>(raw()); }
  template <class T> const T *data() const { return static_cast<const T *>(raw()); }

  Tensor clone() const;
  // Same storage, new shape with the same element count.
  Tensor reshaped(Shape shape) const;
  // Element i converted to double / int64 (any numeric dtype).
  double getAsDouble(int64_t i) const;
  int64_t getAsInt(int64_t i) const;
  void setFromDouble(int64_t i, double v);
  // All elements as int64 (for shape-like tensors).
  std::vector<int64_t> toInt64Vector() const;
  // Bitwise equality of dtype, shape and bytes.
  bool identical(const Tensor &o) const;

private:
  DType dtype_ = DType::Undefined;
  Shape shape_;
  std::shared_ptr<uint8_t[]> storage_;
};

} // namespace megac
