#include "runtime/stream/ShadowMemory.h"

namespace megac::stream {

static std::string span(int64_t a, int64_t b) { return "bytes [" + std::to_string(a) + ", " + std::to_string(b) + ")"; }

void ShadowMemory::write(int64_t offset, int64_t bytes, const Stamp &stamp) {
  if (bytes <= 0) return;
  const int64_t end = offset + bytes;
  // Cut the range that starts before `offset` and reaches into it.
  auto it = ranges_.lower_bound(offset);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end > offset) {
      Range tail = prev->second;
      prev->second.end = offset;
      if (tail.end > end) ranges_[end] = Range{tail.end, tail.stamp};
    }
  }
  // Drop or cut the ranges that start inside [offset, end).
  it = ranges_.lower_bound(offset);
  while (it != ranges_.end() && it->first < end) {
    if (it->second.end > end) {
      Range tail = it->second;
      ranges_.erase(it);
      ranges_[end] = tail;
      break;
    }
    it = ranges_.erase(it);
  }
  ranges_[offset] = Range{end, stamp};
}

std::string ShadowMemory::check(int64_t offset, int64_t bytes, int64_t expected) const {
  if (bytes <= 0) return "";
  const int64_t end = offset + bytes;
  int64_t at = offset;
  auto it = ranges_.upper_bound(offset);
  if (it != ranges_.begin()) --it;
  for (; at < end; ++it) {
    if (it == ranges_.end() || it->first > at) // a gap: never written
      return span(at, it == ranges_.end() ? end : std::min(end, it->first)) + " were never written";
    if (it->second.end <= at) continue;
    if (it->second.stamp.id != expected)
      return span(at, std::min(end, it->second.end)) + " hold " + it->second.stamp.what;
    at = it->second.end;
  }
  return "";
}

} // namespace megac::stream
