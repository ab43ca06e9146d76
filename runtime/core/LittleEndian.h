#pragma once
// Little-endian integers in the headers of megac's own files (plans,
// checkpoint metadata), independent of the host's byte order.
#include <cstdint>
#include <string>

namespace megac {

inline void putLE(std::string &out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}

inline uint64_t getLE(const char *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}

} // namespace megac
