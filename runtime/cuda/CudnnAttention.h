#pragma once
// Scaled dot-product attention through cuDNN's fused flash-attention engines
// (the backend graph API; no cudnn-frontend), for the bf16 compute mode: f32
// Q, K, V are converted to bf16 in the kernel workspace, cuDNN runs the fused
// forward (with the softmax stats) or backward, and the results are converted
// back to f32. The Attention kernels (AttentionKernels.cu) dispatch here when
// the case is one cuDNN supports and fall back to their materialized-score
// path otherwise.
//
// The graphs are the ones cudnn-frontend builds for sdpa / sdpa_backward
// (its composite nodes, cuDNN < 9.21): MATMUL(Q, K^T), scale, the causal mask
// (GEN_INDEX row/col, CMP_GE, BINARY_SELECT with -inf), the softmax as
// reductions and pointwise ops with the stats output, MATMUL(P, V); the
// backward recomputes P from the stats. Execution plans are built once per
// (handle, device, shape, scale, direction) and cached process-wide.
#include "runtime/cuda/GpuKernel.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace megac::cuda {

// One attention problem. Q is [B, Hq, S, D], K [B, Hkv, S, D], V [B, Hkv, S, Dv]
// and Y [B, Hq, S, Dv] (their gradients alike), packed; with bshd they are
// [B, S, heads * dim] instead (ONNX's 3-D form). Hq is a multiple of Hkv; the
// q heads of one kv head are consecutive (GQA).
struct SdpaShape {
  int64_t batch = 0, qHeads = 0, kvHeads = 0, seq = 0, headDim = 0, vHeadDim = 0;
  bool bshd = false;
  bool causal = false; // top-left aligned: query i sees keys j <= i
  float scale = 1.0f;  // applied to Q K^T
};

// True where megac was built with cuDNN.
bool cudnnAttentionBuiltIn();

// Empty where cuDNN's fused attention can take this shape (an engine must
// still be found at run time), else why not.
std::string cudnnSdpaShapeProblem(const SdpaShape &s);

// The workspace bytes the cuDNN path needs for this problem, building (and
// caching) its execution plans with ctx.dnn: without the residue where
// ctx.attentionStashBytes can hold it (plan::fusedAttentionScratchBytes),
// else all of it (plan::fusedAttentionWorkspaceBytes); 0 where it cannot
// run: no cuDNN, no handle, or no engine for the shape (cached; the reason
// goes to cudnnAttentionStats().lastFallback and, once, to stderr).
size_t cudnnSdpaWorkspace(GpuContext &ctx, const SdpaShape &s, bool backward);

// Which values of a program run Q, K and V are (their DeviceTensors in that
// run: GpuKernelContext::input): a forward and a gradient of the same three
// share the forward's residue through ctx.attentionStash.
struct SdpaSource {
  const void *q = nullptr, *k = nullptr, *v = nullptr;
};

// Y = softmax(scale Q K^T [+ causal mask]) V on ctx.stream. Returns false
// without touching the outputs where the cuDNN path cannot run this problem
// (see cudnnSdpaWorkspace) or the workspace is smaller than it needs; the
// caller then computes it another way. With a stash that holds them
// (plan::fusedAttentionStashBytes), the bf16 Q, K, V, O and the softmax
// stats are written there, not in the workspace, and with a source they stay
// for the gradient of the same run.
llvm::Expected<bool> cudnnSdpaForward(GpuContext &ctx, const SdpaShape &s, const float *q, const float *k,
                                      const float *v, float *y, void *workspace, size_t workspaceBytes,
                                      const SdpaSource *source = nullptr);

// dQ, dK, dV from dY (any of the three may be null: not wanted). cuDNN's
// backward needs the forward's output and stats: the stash's, where the last
// forward of this run was of the same source and problem, else recomputed
// here (into the stash where there is one, over what it held). dK and dV
// are summed over each kv head's group of q heads. Same contract as above.
// `operandsStashed`: the plan ended Q, K and V at the forward
// (runtime/plan/AttentionStash.h); an error where the stash does not hold
// this source's residue, instead of reading them.
llvm::Expected<bool> cudnnSdpaBackward(GpuContext &ctx, const SdpaShape &s, const float *dy, const float *q,
                                       const float *k, const float *v, float *dq, float *dk, float *dv,
                                       void *workspace, size_t workspaceBytes, const SdpaSource *source = nullptr,
                                       bool operandsStashed = false);

// What went through cuDNN in this process (for tests and diagnostics).
struct CudnnAttentionStats {
  uint64_t forwardCalls = 0, backwardCalls = 0; // cuDNN executions that were enqueued
  uint64_t stashedBackwardCalls = 0;             // of the backward ones: on a stashed forward
  std::string lastFallback;                     // why cuDNN last declined a problem it was offered
};
CudnnAttentionStats cudnnAttentionStats();

} // namespace megac::cuda
