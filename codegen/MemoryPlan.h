#pragma once
// The arena planner of one plan Program (issue 4, "lifetimes and offsets"):
// codegen/PlanMemory.cpp stores its offsets in Program.arena_offsets /
// arena_bytes, codegen/StreamSchedule.cpp places the device regions with
// placeIntervals, and `megac plan --schedule` prints planArena's bounds. The
// rules it plans by, which the checker and the runtimes read too, are in
// runtime/plan/ArenaRules.h (the checker re-derives lifetimes on its own).
#include "runtime/plan/ArenaRules.h"

#include <vector>

namespace megac::plan {

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
