#pragma once
// Version stamps over a simulated memory (the CPU stream executor's device
// allocation and pinned staging): which write last filled each byte range.
// A write stamps its bytes; a read names the stamp it expects and fails, with
// what the bytes hold instead, where any of its bytes hold another stamp or
// none. Ranges are kept as disjoint intervals, so the cost is per write and
// read, not per byte.
#include <cstdint>
#include <map>
#include <string>

namespace megac::stream {

struct Stamp {
  int64_t id = -1;      // what the bytes hold (the executor's numbering); -1: never written
  std::string what;     // "CHECKPOINT 3 ('h1') from action 7 (FORWARD of 'layer.0')"
};

class ShadowMemory {
public:
  void write(int64_t offset, int64_t bytes, const Stamp &stamp);
  // Empty when every byte of [offset, offset + bytes) holds `expected`;
  // otherwise what the first other range holds ("never written" or its
  // stamp's description) and where.
  std::string check(int64_t offset, int64_t bytes, int64_t expected) const;
  void clear() { ranges_.clear(); }

private:
  struct Range {
    int64_t end;
    Stamp stamp;
  };
  std::map<int64_t, Range> ranges_; // start -> [start, end) and its stamp
};

} // namespace megac::stream
