#pragma once
// FNV-1a over bytes: the weight hash that codegen records and the runtime
// checks must be computed by one function.
#include <cstddef>
#include <cstdint>

namespace megac {

inline constexpr uint64_t kFnvOffset = 1469598103934665603ull;

inline uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const auto *p = static_cast<const uint8_t *>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

} // namespace megac
