#pragma once
// Element counts and byte sizes that come from files or flags, computed so
// that they cannot wrap: each returns nullopt where the true value would
// exceed `limit` (int64 max by default) or a dimension is negative.
#include "runtime/core/Tensor.h"

#include <cstdint>
#include <limits>
#include <optional>

namespace megac {

inline constexpr int64_t kMaxSize = std::numeric_limits<int64_t>::max();

// a * b, or nullopt past `limit` (a, b >= 0).
inline std::optional<int64_t> checkedMul(int64_t a, int64_t b, int64_t limit = kMaxSize) {
  if (a < 0 || b < 0) return std::nullopt;
  if (a != 0 && b > limit / a) return std::nullopt;
  return a * b;
}

// a + b, or nullopt past `limit` (a, b >= 0).
inline std::optional<int64_t> checkedAdd(int64_t a, int64_t b, int64_t limit = kMaxSize) {
  if (a < 0 || b < 0 || a > limit - b) return std::nullopt;
  return a + b;
}

// The product of the dims, or nullopt if one is negative or it passes `limit`.
template <typename Dims> std::optional<int64_t> checkedNumel(const Dims &dims, int64_t limit = kMaxSize) {
  int64_t n = 1;
  for (int64_t d : dims) {
    auto m = checkedMul(n, d, limit);
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

// numel * element size, or nullopt.
template <typename Dims>
std::optional<int64_t> checkedNbytes(const Dims &dims, int64_t elementSize, int64_t limit = kMaxSize) {
  auto n = checkedNumel(dims, limit);
  return n ? checkedMul(*n, elementSize, limit) : std::nullopt;
}

} // namespace megac
