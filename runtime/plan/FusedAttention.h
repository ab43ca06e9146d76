#pragma once
// Which attention problems the bf16 mode runs through cuDNN's fused flash
// attention (runtime/cuda/CudnnAttention.h) instead of on materialized scores,
// and the scratch the fused path takes. The planner budgets the WORKSPACE
// region by these and the CUDA kernels choose their path by them, so both
// agree: a fused problem is budgeted O(B H S D) bytes, not the materialized
// path's O(B H S^2).
#include "runtime/cpu/NormAttentionShapes.h"

#include <cstdint>
#include <string>

namespace megac::plan {

// Shorter sequences stay on the materialized path: as fast there, with an
// fp32 softmax (the bf16 fixture trajectories drifted 10x further from the
// fp32 reference with cuDNN at seq 16; not understood yet).
inline constexpr int64_t kMinFusedAttentionSeq = 64;

// Empty where cuDNN's fused attention takes these sizes, else why not.
std::string fusedAttentionShapeProblem(int64_t batch, int64_t qHeads, int64_t kvHeads, int64_t seq, int64_t headDim,
                                       int64_t vHeadDim);

// Whether an Attention or megac.AttentionGrad of these dims runs fused in a
// bf16 plan. `plainOperands`: Q, K, V (and dY) are f32 and the op has no
// attn_mask, past cache or nonpad_kv_seqlen input, nor (forward) any output
// but Y. Beyond that: no softcap or sliding window, as many queries as keys,
// at least kMinFusedAttentionSeq of them, and sizes cuDNN takes.
bool runsFused(const cpu::AttentionDims &d, bool plainOperands);

// cuDNN's own workspace, as budgeted: cuDNN 9.19 on the H200 asks 0 bytes for
// the forward and one fp32 [B, H, S, D] accumulator for the backward; 1 MiB
// more for what another version might add. Where cuDNN asks more, the runtime
// allocates beyond the plan and says so.
int64_t cudnnOwnWorkspaceBudget(int64_t batch, int64_t qHeads, int64_t seq, int64_t headDim, bool grad);

// The fused path's scratch (runtime/cuda/CudnnAttention.cu carves it in this
// order, each piece 256-byte aligned): bf16 copies of Q, K, V and Y, the
// softmax stats; in the backward also dY, dQ, dK, dV in bf16, the rows'
// sum(dY * Y) and an fp32 dQ accumulator; then cuDNN's own workspace
// (`cudnnBytes`, or cudnnOwnWorkspaceBudget where negative).
int64_t fusedAttentionWorkspaceBytes(int64_t batch, int64_t qHeads, int64_t kvHeads, int64_t seq, int64_t headDim,
                                     int64_t vHeadDim, bool grad, int64_t cudnnBytes = -1);

// The same less its first five pieces, which sit in the stash instead: what
// the kernels' scratch holds for a fused attention in a bf16 plan, whose
// stash (below) is sized for every fused attention it runs. A forward leaves
// its residue there for the gradient; a gradient that finds another's there
// (kept activations, or a forward of another program run) writes its own
// forward's over it. So the residue's bytes are counted once, not again in
// the scratch (at 7B, 32 KB a token of 128).
int64_t fusedAttentionScratchBytes(int64_t batch, int64_t qHeads, int64_t kvHeads, int64_t seq, int64_t headDim,
                                   int64_t vHeadDim, bool grad, int64_t cudnnBytes = -1);

// Its first five pieces (bf16 Q, K, V, Y and the stats): what a fused forward
// leaves in the stash, an area of the WORKSPACE region past the kernels'
// scratch, for the gradient of the same program run, which then skips its
// own forward (a unit's recomputed forward, then its gradient).
int64_t fusedAttentionStashBytes(int64_t batch, int64_t qHeads, int64_t kvHeads, int64_t seq, int64_t headDim,
                                 int64_t vHeadDim);

} // namespace megac::plan
