#pragma once
// Device memory of one plan Program (issue 4, "lifetimes and offsets"),
// shared by codegen (which fills Program.arena_offsets / arena_bytes) and the
// runtime and plan checker (which re-derive the same lifetimes).
//
// Rules:
// - Only TEMP values live in the arena; arguments and constants live
//   elsewhere (offset -1).
// - A value lives from the op that writes it to the last op that reads it,
//   inclusive; results live to the end of the program (index ops_size()).
//   An op's inputs and outputs are therefore live at the same time and never
//   share bytes.
// - A view op (Reshape, Squeeze, Unsqueeze, Flatten, Identity) whose input is
//   a TEMP may share the input's bytes: its output has the same offset, and
//   the shared buffer lives until the last reader of any value in the chain.
//   When the input is an argument or a constant the view gets its own bytes
//   (the kernel copies).
// - Buffers are 256-byte aligned and their sizes rounded up to 256.
#include "runtime/plan/PlanIO.h"

#include <vector>

namespace megac::plan {

inline constexpr int64_t kAlignment = 256;
inline int64_t alignUp(int64_t n, int64_t a = kAlignment) { return (n + a - 1) / a * a; }

// Bytes of a tensor of this type (not rounded); -1 for an undefined dtype or
// a negative dimension.
int64_t typeBytes(const TensorType &t);

// Reshape, Squeeze, Unsqueeze, Flatten, Identity: the output may share input 0's bytes.
bool isViewOp(llvm::StringRef opType);

// When and where one value of a program lives.
struct ValueLife {
  bool inArena = false; // a TEMP written by an op
  int32_t root = -1;    // the value owning the bytes (itself, or the TEMP a view chain starts from)
  int32_t def = -1;     // index of the op that writes it
  int32_t last = -1;    // index of the last op that reads it (ops_size() for results; def if never read)
  int64_t bytes = 0;    // its size rounded up to 256
};

// Per value (indexed like Program.values). Errors on malformed programs: a
// value written twice, a TEMP read before it is written, ids out of range.
llvm::Expected<std::vector<ValueLife>> computeLifetimes(const Program &p);

// One block to place: live over [first, last] (inclusive), `bytes` long.
struct Interval {
  int64_t first = 0, last = 0;
  int64_t bytes = 0;
};

inline bool lifetimesOverlap(int64_t f1, int64_t l1, int64_t f2, int64_t l2) { return f1 <= l2 && f2 <= l1; }
inline bool bytesOverlap(int64_t o1, int64_t b1, int64_t o2, int64_t b2) { return o1 < o2 + b2 && o2 < o1 + b1; }
// [off, off + bytes) lies inside [0, total), without overflow for any values
// a plan file may hold.
inline bool blockWithin(int64_t off, int64_t bytes, int64_t total) {
  return off >= 0 && bytes >= 0 && total >= 0 && off <= total && bytes <= total - off;
}

// The placement heuristic, also used for the device regions: blocks by size,
// largest first (then earliest first), each at the lowest 256-aligned offset
// that does not overlap a block already placed whose lifetime overlaps its
// own. Returns the offsets; `*totalBytes` is the end of the highest block.
std::vector<int64_t> placeIntervals(const std::vector<Interval> &blocks, int64_t *totalBytes);

struct ArenaPlan {
  std::vector<int64_t> offsets; // per value; -1 outside the arena
  int64_t arenaBytes = 0;
  int64_t sumBytes = 0;   // every buffer with bytes of its own (no reuse)
  int64_t lowerBound = 0; // the most bytes live at once, over the program's ops
};

llvm::Expected<ArenaPlan> planArena(const Program &p);

// Plans the arena of `p` and stores it in p.arena_offsets / p.arena_bytes.
llvm::Error assignArena(Program &p);

} // namespace megac::plan
