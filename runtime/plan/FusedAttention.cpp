#include "runtime/plan/FusedAttention.h"

#include "runtime/plan/ArenaRules.h"

#include <algorithm>

namespace megac::plan {

std::string fusedAttentionShapeProblem(int64_t batch, int64_t qHeads, int64_t kvHeads, int64_t seq, int64_t headDim,
                                       int64_t vHeadDim) {
  if (batch <= 0 || qHeads <= 0 || kvHeads <= 0 || seq <= 0) return "an empty dimension";
  if (qHeads % kvHeads != 0) return "q heads are not a multiple of kv heads";
  for (int64_t d : {headDim, vHeadDim})
    if (d <= 0 || d % 8 != 0 || d > 256) return "head sizes must be multiples of 8 up to 256";
  return "";
}

bool runsFused(const cpu::AttentionDims &d, bool plainOperands) {
  if (!plainOperands) return false;
  if (d.softcap > 0 || d.leftWindow >= 0 || d.rightWindow >= 0 || d.pastSeq != 0 || d.qSeq != d.totalSeq)
    return false;
  if (d.qSeq < kMinFusedAttentionSeq) return false;
  return fusedAttentionShapeProblem(d.batch, d.qHeads, d.kvHeads, d.qSeq, d.headSize, d.vHeadSize).empty();
}

int64_t cudnnOwnWorkspaceBudget(int64_t batch, int64_t qHeads, int64_t seq, int64_t headDim, bool grad) {
  return (grad ? 4 * batch * qHeads * seq * headDim : 0) + (int64_t(1) << 20);
}

static int64_t aligned(int64_t n) { return alignUp(std::max<int64_t>(n, 0), 256); }

int64_t fusedAttentionStashBytes(int64_t B, int64_t H, int64_t KVH, int64_t S, int64_t D, int64_t Dv) {
  return aligned(2 * B * H * S * D) + aligned(2 * B * KVH * S * D) + aligned(2 * B * KVH * S * Dv) + // Q, K, V
         aligned(2 * B * H * S * Dv) + aligned(4 * B * H * S);                                      // Y, stats
}

int64_t fusedAttentionWorkspaceBytes(int64_t B, int64_t H, int64_t KVH, int64_t S, int64_t D, int64_t Dv, bool grad,
                                     int64_t cudnnBytes) {
  return fusedAttentionStashBytes(B, H, KVH, S, D, Dv) +
         fusedAttentionScratchBytes(B, H, KVH, S, D, Dv, grad, cudnnBytes);
}

int64_t fusedAttentionScratchBytes(int64_t B, int64_t H, int64_t KVH, int64_t S, int64_t D, int64_t Dv, bool grad,
                                   int64_t cudnnBytes) {
  int64_t bytes = 0;
  auto take = [&](int64_t n) { bytes += aligned(n); };
  if (grad) {
    take(2 * B * H * S * Dv);  // dY
    take(2 * B * H * S * D);   // dQ
    take(2 * B * KVH * S * D); // dK
    take(2 * B * KVH * S * Dv); // dV
    take(4 * B * H * S);       // sum(dY * Y)
    take(4 * B * H * S * D);   // dQ accumulator
  }
  take(cudnnBytes >= 0 ? cudnnBytes : cudnnOwnWorkspaceBudget(B, H, S, D, grad));
  return bytes;
}

} // namespace megac::plan
