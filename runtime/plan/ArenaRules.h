#pragma once
// The rules of a plan Program's device memory (issue 4, "lifetimes and
// offsets") that both sides read: codegen plans the arena by them
// (codegen/MemoryPlan.h fills Program.arena_offsets / arena_bytes), and the
// checker and the runtimes size, align and bound-check what they read by them.
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
// - A megac.AttentionGrad with `stashed_operands = 1` reads its inputs 1-3
//   (Q, K, V) for their shapes only (runtime/plan/AttentionStash.h): it does
//   not keep them live.
// - Buffers are 256-byte aligned and their sizes rounded up to 256.
#include "runtime/plan/PlanIO.h"

#include <vector>

namespace megac::plan {

inline constexpr int64_t kAlignment = 256;
inline int64_t alignUp(int64_t n, int64_t a = kAlignment) { return (n + a - 1) / a * a; }

// Bytes of a tensor of this type (not rounded); -1 for an undefined dtype or
// a negative dimension.
int64_t typeBytes(const TensorType &t);

// Size in bytes of a tensor of `t` (0 for an undefined dtype; unchecked: the
// report's and the cost model's count of a checked plan).
int64_t tensorBytes(const TensorType &t);

inline constexpr const char *kStashedOperandsAttr = "stashed_operands";
// A megac.AttentionGrad whose Q, K and V come from the attention stash.
bool hasStashedOperands(const Program::Op &op);
// Whether `op` reads the bytes of its input `index` (else only its shape).
bool readsBytes(const Program::Op &op, int index);

// Reshape, Squeeze, Unsqueeze, Flatten, Identity: the output may share input 0's bytes.
bool isViewOp(llvm::StringRef opType);
// Per value, the value whose bytes it shares by the view rule above: itself,
// or, for a view's output whose input is a TEMP of as many bytes, the
// input's root (ops are in order, so an input's root is final by its view).
std::vector<int32_t> viewRoots(const Program &p);

inline bool lifetimesOverlap(int64_t f1, int64_t l1, int64_t f2, int64_t l2) { return f1 <= l2 && f2 <= l1; }
inline bool bytesOverlap(int64_t o1, int64_t b1, int64_t o2, int64_t b2) { return o1 < o2 + b2 && o2 < o1 + b1; }
// [off, off + bytes) lies inside [0, total), without overflow for any values
// a plan file may hold.
inline bool blockWithin(int64_t off, int64_t bytes, int64_t total) {
  return off >= 0 && bytes >= 0 && total >= 0 && off <= total && bytes <= total - off;
}

} // namespace megac::plan
