#pragma once
// The bf16 pack cache (bf16 plans): a region of the WORKSPACE where a program's
// products keep the bf16 copies of operands that a later product of the same
// run reads again, so that each is packed once per run instead of once per
// product. In a layer's backward the normed input is read by the recomputed
// q, k and v products and again by their three weight gradients, an output
// gradient by its input-gradient and weight-gradient products, a weight by
// its forward product and its input gradient's.
//
// One set of rules for three readers: the planner sizes the region by them
// (StreamSchedule.pack_cache_bytes), the cost model charges the packing by
// them, and the CUDA runtime (GpuProgram, ltMatmul) stores and finds copies
// by them.
// - An operand is a MatMul's or Gemm's input 0 or 1. Operands are the same
//   where their values share bytes (a view of a TEMP shares its input's,
//   ArenaRules.h) and have the same shape.
// - A product stores its operand's copy where a later product of the program
//   reads the same value (through views), and the region has room left: the
//   copies are laid one after another (256-aligned) and the region is emptied
//   at the start of each program run. Any product may read a stored copy.
// - A copy is dropped when an op writes over its source's bytes (a value
//   that took them once the source's last reader had run), and with the run.
// Packing rounds each element to nearest even, so a copy is the operand a
// product would have packed itself: results do not change, bit for bit.
#include "runtime/plan/PlanIO.h"

#include <array>
#include <vector>

namespace megac::plan {

struct PackCacheUse {
  // Per op: the operands its inputs 0 and 1 are (indices into operandBytes;
  // -1 where the op is no product or the input is absent), and whether it
  // stores the bf16 copy of each.
  std::vector<std::array<int32_t, 2>> operand;
  std::vector<std::array<bool, 2>> stores;
  // Per operand: the bytes of its bf16 copy (256-aligned).
  std::vector<int64_t> operandBytes;
  // The region that holds every copy the program stores.
  int64_t bytes = 0;
};
PackCacheUse packCacheUse(const Program &p);

// The bytes of the region a bf16 plan's programs need to store every copy
// they would (the most over programs); 0 for other plans.
int64_t packCacheNeedBytes(const Plan &p);

} // namespace megac::plan
