#pragma once
// Carves 256-byte aligned buffers out of a kernel's workspace, in order, or
// only counts the bytes when the base is null (a workspace function sizing
// the same layout the kernel then carves).
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace megac::cuda {

class WorkspaceCarver {
public:
  explicit WorkspaceCarver(void *base) : base_(static_cast<char *>(base)) {}
  // `count` elements of T (none for count <= 0); null while only counting.
  template <class T = float> T *take(int64_t count) {
    T *p = base_ ? reinterpret_cast<T *>(base_ + used_) : nullptr;
    used_ += (size_t(std::max<int64_t>(count, 0)) * sizeof(T) + 255) / 256 * 256;
    return p;
  }
  size_t used() const { return used_; }

private:
  char *base_;
  size_t used_ = 0;
};

} // namespace megac::cuda
