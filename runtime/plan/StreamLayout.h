#pragma once
// How the streaming runtime lays bytes out inside the device regions of a
// plan's schedule (plan.proto: StreamSchedule, DeviceRegion). Shared by the
// schedule builder (codegen), the plan checker and the CUDA runtime, so that
// all three agree on every offset.
#include "runtime/cpu/LinearCrossEntropyChunks.h"
#include "runtime/cpu/NormAttentionShapes.h"
#include "runtime/plan/PlanIO.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace megac::plan {

// A unit's fp32 parameters packed into one weight slot, in unit.parameters()
// order, each starting 256-byte aligned. The unit's parameter gradients use
// the same layout in a grad slot (and in a pinned host staging slot).
struct WeightLayout {
  std::vector<int64_t> offsets; // per entry of unit.parameters(): byte offset in the slot
  int64_t bytes = 0;            // bytes the unit needs: the last parameter's end, rounded up to 256
};

// `unitIndex` and the unit's parameter ids must be valid (checkPlan checks them).
WeightLayout unitWeightLayout(const Plan &p, int unitIndex);

// The largest unit layout: the bytes of each grad slot (every unit's
// gradients pass through one) and, over the units that stream (`streamedOnly`:
// not resident; 0 if none), of each weight slot.
int64_t largestUnitWeightBytes(const Plan &p, bool streamedOnly = false);
// Grad slot g's bytes, its GRAD_SLOT region's and its pinned staging slot's
// (StreamSchedule.small_grad_slots: the last ones may be smaller).
inline int64_t gradSlotBytes(const StreamSchedule &s, int g) {
  return s.small_grad_slots() > 0 && g >= s.grad_slots() - s.small_grad_slots() ? s.small_grad_slot_bytes()
                                                                               : s.grad_slot_bytes();
}
// Where staging slot g starts in the pinned staging (the slots in order);
// stagingOffset(s, grad_slots) is the bytes of them all.
inline int64_t stagingOffset(const StreamSchedule &s, int g) {
  int64_t off = 0;
  for (int k = 0; k < g; ++k) off += gradSlotBytes(s, k);
  return off;
}

// The bf16 copy of a weight slot of `slotBytes` (a WEIGHT_COPY region, where
// StreamSchedule.weight_copy_bytes says there are copies): fp32 element i of
// the slot at byte 2 i, so each parameter's copy starts at half its slot
// offset (128-byte aligned).
inline int64_t weightCopyBytes(int64_t slotBytes) { return ((slotBytes / 2 + 255) / 256) * 256; }

// Whether a unit can be resident (its AdamW on the GPU): it has parameters and
// shares none with another unit (tied weights sum their gradients on the host).
bool canBeResident(const Plan &p, int unitIndex);

// A resident unit's RESIDENT region: its weights, AdamW m, then v, each a
// unitWeightLayout of `bytes`, at these offsets.
struct ResidentLayout {
  int64_t weights = 0, m = 0, v = 0, bytes = 0;
};
inline ResidentLayout residentLayout(const Plan &p, int unitIndex) {
  const int64_t b = unitWeightLayout(p, unitIndex).bytes;
  return {0, b, 2 * b, 3 * b};
}

// An adamw_on_gpu unit's moments in the MOMENT_SLOT of its weight slot: m,
// then v, each a unitWeightLayout of `bytes`.
struct MomentLayout {
  int64_t m = 0, v = 0, bytes = 0;
};
inline MomentLayout momentLayout(const Plan &p, int unitIndex) {
  const int64_t b = unitWeightLayout(p, unitIndex).bytes;
  return {0, b, 2 * b};
}
// Whether the unit streams and its AdamW runs on the GPU (Unit.adamw_on_gpu;
// a resident unit's runs there anyway, from its RESIDENT region).
inline bool adamwOnGpu(const Unit &u) { return u.adamw_on_gpu() && !u.resident(); }
// Whether any unit's does (the schedule then has moment slots and m events).
bool anyAdamwOnGpu(const Plan &p);
// Each MOMENT_SLOT's bytes: the largest momentLayout of those units (0 if none).
int64_t momentSlotBytes(const Plan &p);

// The templates' constants in the CONSTANTS region: templates in order, each
// forward, backward, then (where present) forward_keep and backward_kept
// program, CONSTANT values in id order, each 256-byte aligned; the runtime
// uploads them there once.
struct ConstantsLayout {
  // [template][value id] -> byte offset in the region, -1 for other values
  // (forwardKeep/backwardKept: empty for a template without those programs).
  std::vector<std::vector<int64_t>> forward, backward, forwardKeep, backwardKept;
  int64_t bytes = 0;
};
ConstantsLayout constantsLayout(const Plan &p);

// The kernels' scratch (the WORKSPACE region): a budget, from shapes. The
// largest of: each Attention op's (attentionWorkspaceBytes), the fused loss's,
// in bf16 plans the bf16 copies of the largest MatMul/Gemm's two operands;
// then the attention stash (attentionStashBytes), the bf16 pack cache
// (StreamSchedule.pack_cache_bytes, runtime/plan/PackCache.h) and 32 MiB for cuBLASLt.
// The runtime sizes its kernels' scratch itself and allocates beyond the
// region, with a warning, where they need more.
inline constexpr int64_t kGemmWorkspaceBytes = int64_t(32) << 20;
// The largest Attention/megac.AttentionGrad scratch of one program, 0 without
// attention: materializedAttentionBytes, or where a bf16 plan runs it fused
// (plan::runsFused) plan::fusedAttentionScratchBytes (its residue sits in the
// stash, which workspaceBudgetBytes adds once).
int64_t attentionWorkspaceBytes(const Program &p, bool bf16);
// The dims of an Attention or megac.AttentionGrad op of p, from the types of
// its inputs and its attributes; an error naming the op where they are not valid.
llvm::Expected<cpu::AttentionDims> attentionOpDims(const Program &p, const Program::Op &op);
// What plan::runsFused calls plain operands for an Attention or
// megac.AttentionGrad op: f32 Q, K, V (and dY), no attn_mask, past cache or
// nonpad_kv_seqlen input, and (forward) no output but Y.
bool attentionOperandsPlain(const Program &p, const Program::Op &op);
// Where bf16 plans run attention fused: the largest such op's
// plan::fusedAttentionStashBytes, else 0.
int64_t attentionStashBytes(const Plan &p);
// The scratch holding bf16 copies of operands of elemsA and elemsB elements
// (each copy 256-byte aligned): what the runtime's products ask to pack
// their operands in bf16 plans. Every product is packed, however small, so
// that bf16 plans round the same way at every size.
inline int64_t bf16PackBytes(int64_t elemsA, int64_t elemsB) {
  return ((elemsA + 127) / 128 * 128 + (elemsB + 127) / 128 * 128) * 2;
}
// The area where attention on materialized scores (runtime/cuda/AttentionKernels.cu)
// packs its products' operands to bf16 in bf16 plans, beyond its fp32 buffers:
// B batches, H query heads over KVH kv heads, S queries, T keys, head sizes D
// (Q, K) and Dv (V); for a chunk of rows, H = KVH and S = the chunk's rows. The forward packs Q K^T's and P V's operands there. The
// backward packs dO V^T's there, and each other product's in the fp32 score
// matrix [B, H, S, T] that is free during it (dP's before dP is formed, P's
// after the softmax gradient) where they fit, so only the rest take room.
inline int64_t attentionPackBytes(int64_t B, int64_t H, int64_t KVH, int64_t S, int64_t T, int64_t D, int64_t Dv,
                                  bool grad) {
  const int64_t q = B * H * S * D, k = B * KVH * T * D, v = B * KVH * T * Dv, o = B * H * S * Dv, p = B * H * S * T;
  if (!grad) return std::max(bf16PackBytes(q, k), bf16PackBytes(p, v)); // Q K^T, P V
  auto unlessInScores = [&](int64_t bytes) { return bytes <= 4 * p ? 0 : bytes; };
  return std::max({bf16PackBytes(o, v), unlessInScores(bf16PackBytes(q, k)), // dO V^T, Q K^T
                   unlessInScores(bf16PackBytes(p, o)), unlessInScores(bf16PackBytes(p, k)), // P^T dO, dS K
                   unlessInScores(bf16PackBytes(p, q))});                                     // dS^T Q
}
// Attention on materialized scores (runtime/cuda/AttentionKernels.cu) stacks
// the q heads of each kv head into one [group * Sq, Skv] score matrix per
// (batch, kv head): B * KVH units of group * Sq rows. Where the fp32 score
// matrices of all rows would pass attentionScoreBudgetBytes(), it takes the
// rows a chunk at a time, the same rows of every unit (dK and dV then sum
// over chunks), so that long sequences fit in fp32/tf32 plans, under masks
// and wherever cuDNN's fused attention does not run.
int64_t attentionScoreBudgetBytes(); // 4 GiB
// Tests shrink the budget to make small problems chunk.
class ScopedAttentionScoreBudget {
public:
  explicit ScopedAttentionScoreBudget(int64_t bytes);
  ~ScopedAttentionScoreBudget();

private:
  int64_t saved_;
};
// The rows of each unit taken at once: all `rows` where `matrices` fp32
// [units, rows, keys] matrices fit the budget, else the most that do (a
// multiple of 64 from 64 on), at least 1.
int64_t attentionChunkRows(int64_t units, int64_t rows, int64_t keys, int64_t matrices);
// The materialized path's scratch, exactly as the kernels carve it: the score
// matrices of one chunk (one forward; P and dP for the gradient, and tanh
// under a softcap), Q, K, V, Y (or dY, dQ, dK, dV) gathered to [B, heads, S,
// D] for 3-D inputs (K and V also under a past cache), and in bf16 plans the
// operand copies of one chunk's products (attentionPackBytes).
int64_t materializedAttentionBytes(const cpu::AttentionDims &d, bool grad, bool bf16);
// The fused loss's chunk of rows (runtime/cpu/LinearCrossEntropyChunks.h),
// shared by both backends' kernels and the workspace budget below.
using cpu::kLinearCrossEntropyChunkBytes;
using cpu::kLinearCrossEntropyMaxChunkBytes;
using cpu::kLinearCrossEntropyMinChunkRows;
using cpu::linearCrossEntropyChunkRows;
// The CUDA kernels' exact scratch for `rows` tokens of `hidden` x `vocab`
// (runtime/cuda/LinearCrossEntropyKernels.cu carves it in this order, each
// piece 256-byte aligned): the chunk's fp32 logits; per-row losses and
// counts (forward) or the count (grad); in bf16 plans W packed to bf16 once,
// and room for ltMatmul to pack the other operands of one product.
int64_t linearCrossEntropyWorkspaceBytes(bool grad, int64_t rows, int64_t hidden, int64_t vocab, int64_t chunkRows,
                                         bool bf16);
int64_t linearCrossEntropyBytes(const Program &p, bool bf16); // the largest of one program
int64_t gemmPackBytes(const Program &p);       // bf16 copies of the largest MatMul/Gemm's operands
int64_t workspaceBudgetBytes(const Plan &p);

// Event names of a schedule: "w<k>.ready", "w<k>.free" (weight slots),
// "g<k>.*" (grad slots), "s<k>.*" (pinned host staging slots), "m<k>.*"
// (moment slots, beside weight slot k).
std::string slotEventName(char slotKind, int slot, bool ready);
// Parses such a name; false if it is not one.
bool parseSlotEventName(llvm::StringRef name, char &slotKind, int &slot, bool &ready);
// Overlapping steps (StreamSchedule.overlap_steps): "u<unit>.updated", which
// the CPU UPDATE of a streamed unit records.
std::string unitUpdatedEventName(int unit);
// A streamed unit whose AdamW runs on the host (its UPDATE is a CPU action).
inline bool steppedOnHost(const Unit &u) { return !u.resident() && !u.adamw_on_gpu(); }
// The units that share a parameter with unit u (u first, then in forward
// order): a tied parameter is updated once all of them added to its gradient.
std::vector<int> unitsSharingParameters(const Plan &p, int unitIndex);

// Micro-batches each pass carries through every unit (StreamSchedule.micro_batches; 1 where unset).
inline int passMicroBatches(const StreamSchedule &s) { return s.micro_batches() > 1 ? s.micro_batches() : 1; }
// What a runtime checks before it sizes its per-micro-batch books: at most
// 4096 micro-batches a pass, and every action's micro_batch among them.
llvm::Error checkPassMicroBatches(const StreamSchedule &s);
// Whether a region is one per micro-batch of the pass (DeviceRegion.micro_batch).
inline bool perMicroBatch(DeviceRegion::Kind k) {
  return k == DeviceRegion::CHECKPOINT || k == DeviceRegion::ACTIVATION_GRAD || k == DeviceRegion::DATA ||
         k == DeviceRegion::SAVED || k == DeviceRegion::LOADED_CHECKPOINT;
}
// Checkpoint offload (plan.proto's StreamSchedule.pinned_checkpoint_bytes):
// the copies of an offloaded checkpoint, out after its forward and back
// before its backward.
inline bool isCheckpointCopy(StreamAction::Kind k) {
  return k == StreamAction::SAVE_CHECKPOINT || k == StreamAction::LOAD_CHECKPOINT;
}
// "c<j>.written", "c<j>.saved", "c<j>.clear", "c<j>.loaded": the events of the j-th offloaded checkpoint.
std::string checkpointEventName(int j, llvm::StringRef what);
// The (activation, micro-batch) checkpoints a LOAD_CHECKPOINT brings back:
// their BACKWARD readers read the LOADED_CHECKPOINT region, not CHECKPOINT.
std::set<std::pair<int, int>> loadedCheckpoints(const StreamSchedule &s);
// The region a unit reads activation input `a` from: DATA for tokens and
// targets, else its CHECKPOINT, or the LOADED_CHECKPOINT a LOAD_CHECKPOINT
// filled where a BACKWARD reads one brought back (`loadedBack`).
inline DeviceRegion::Kind activationRegion(const Activation &a, bool loadedBack) {
  if (a.kind() == Activation::DATA_TOKENS || a.kind() == Activation::DATA_TARGETS) return DeviceRegion::DATA;
  return loadedBack ? DeviceRegion::LOADED_CHECKPOINT : DeviceRegion::CHECKPOINT;
}
// The bytes a SAVE_CHECKPOINT or LOAD_CHECKPOINT copies (its activation's); 0 for other actions.
int64_t checkpointCopyBytes(const Plan &p, const StreamAction &a);
// What a runtime checks before it copies checkpoints: each copy names an
// intermediate activation and a block inside the pinned checkpoint memory.
llvm::Error checkCheckpointCopies(const Plan &p);
// Whether a step keeps its gradients on the host until its end: with a clip
// (the global norm first), more than one pass (grad_accum over micro_batches)
// or more than one GPU (the host sums theirs first).
bool stepKeepsGradients(const Plan &p);
// The GPUs a step runs on: Plan.gpus, 1 where it is 0 (plans before format 14).
inline int planGpus(const Plan &p) { return p.gpus() > 1 ? p.gpus() : 1; }
// The micro-batches a step takes: every GPU's grad_accum.
inline int64_t stepMicroBatches(const Plan &p) {
  return (p.optimizer().grad_accum() > 1 ? p.optimizer().grad_accum() : 1) * planGpus(p);
}

const char *regionKindName(DeviceRegion::Kind k);
const char *actionKindName(StreamAction::Kind k);
// The unit weight layouts an action copies over PCIe: PREFETCH its weights
// and OFFLOAD its gradients 1, FETCH_MOMENTS m and v 2, WRITEBACK weights, m
// and v 3; 0 for the actions that copy nothing.
int transferCopies(StreamAction::Kind k);
const char *streamName(StreamAction::Stream s);

} // namespace megac::plan
