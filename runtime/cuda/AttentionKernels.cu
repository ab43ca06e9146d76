// Attention (ONNX opset 23+) and megac.AttentionGrad on f32, with the
// semantics of runtime/cpu/AttentionKernels.cpp and NNGradKernels.cpp, on
// materialized scores:
//   S = scale * Q K^T                  (one strided-batched GEMM)
//   P = softmax(softcap(S) + bias)     (one kernel over the rows; a row whose
//                                       keys are all masked is 0)
//   Y = P V                            (one strided-batched GEMM)
// (in the bf16 mode the GEMMs' operands are packed to bf16 first, as every
// product is, so P is rounded to bf16 before P V, as in fused attention)
// and backward
//   dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)) * softcap',
//   dQ = scale * dS K, dK = scale * dS^T Q.
// GQA: the q heads of one kv head are consecutive in [B, H, S, D], so their
// rows stack into one [group * S, D] matrix per (batch, kv head): every GEMM
// is batched over B * kv_heads, and dK/dV's sum over the group is the GEMM's
// reduction. 3-D inputs ([B, S, heads * D]) and a past KV cache are first
// gathered into packed [B, heads, seq, D] buffers.
// The bias combines attn_mask (bool: false -> -inf; float: added; keys past
// its last dim -> -inf), is_causal, the sliding windows and
// nonpad_kv_seqlen, exactly as the CPU kernels do.
//
// In the bf16 compute mode, cases cuDNN's fused attention supports (at most
// is_causal for a mask, as many queries as keys, head sizes that are
// multiples of 8 up to 256; see cudnnShape) run through it instead
// (CudnnAttention.h); where it has no engine or the workspace cannot hold its
// bf16 copies, they fall back to the path above.
#include "runtime/cpu/NormAttentionShapes.h"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/WorkspaceCarver.h"
#include "runtime/cuda/GpuKernel.h"
#include "runtime/cuda/LtMatmul.h"
#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/FusedAttention.h"
#include "runtime/plan/StreamLayout.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace megac::cuda {

namespace {

using cpu::AttentionDims;

constexpr float kNegInf = -INFINITY;

// --- Device pieces ---

// What decides the additive bias of a score (b, h, i, j).
struct BiasParams {
  const void *mask = nullptr; // attn_mask, shape mask4, bool or f32
  bool maskBool = false;
  int64_t mask4[4] = {1, 1, 1, 0};
  const void *nonpad = nullptr; // nonpad_kv_seqlen [B], i64 or i32
  bool nonpad64 = true;
  int64_t pastSeq = 0;
  bool causal = false;
  int64_t left = -1, right = -1;
};

// The per-row part of the bias: the mask row, the query's absolute position
// and the number of valid keys.
struct RowBias {
  const uint8_t *maskBool = nullptr;
  const float *maskFloat = nullptr;
  int64_t maskLen = 0;
  int64_t pos = 0, valid = 0;
};

__device__ RowBias rowBias(const BiasParams &p, int64_t b, int64_t h, int64_t i, int64_t qSeq, int64_t T) {
  RowBias r;
  if (p.mask) {
    const int64_t mb = p.mask4[0] == 1 ? 0 : b, mh = p.mask4[1] == 1 ? 0 : h, mi = p.mask4[2] == 1 ? 0 : i;
    const int64_t off = ((mb * p.mask4[1] + mh) * p.mask4[2] + mi) * p.mask4[3];
    if (p.maskBool)
      r.maskBool = static_cast<const uint8_t *>(p.mask) + off;
    else
      r.maskFloat = static_cast<const float *>(p.mask) + off;
    r.maskLen = p.mask4[3];
  }
  r.valid = T;
  int64_t offset = p.pastSeq;
  if (p.nonpad) {
    r.valid = p.nonpad64 ? static_cast<const int64_t *>(p.nonpad)[b] : static_cast<const int32_t *>(p.nonpad)[b];
    if (p.pastSeq == 0) offset = r.valid - qSeq;
  }
  r.pos = i + offset;
  return r;
}

__device__ float biasAt(const BiasParams &p, const RowBias &r, int64_t j) {
  float v = 0.0f;
  if (p.mask) {
    if (j >= r.maskLen) return kNegInf;
    v = r.maskBool ? (r.maskBool[j] ? 0.0f : kNegInf) : r.maskFloat[j];
  }
  if (j >= r.valid) return kNegInf;
  if (p.causal && j > r.pos) return kNegInf;
  if (p.left >= 0 && j < r.pos - p.left) return kNegInf;
  if (p.right >= 0 && j > r.pos + p.right) return kNegInf;
  return v;
}

// Merges a (max, sum of exp(x - max)) pair into another.
__device__ void combineMaxSum(float &m, float &l, float m2, float l2) {
  const float mn = fmaxf(m, m2);
  if (mn == kNegInf) return; // both empty
  l = l * expf(m - mn) + l2 * expf(m2 - mn);
  m = mn;
}

// Reductions over the TPR threads (threadIdx.x) of one row. With TPR > 32
// a block holds one row, so the __syncthreads are uniform.
template <int TPR> __device__ void reduceMaxSum(float &m, float &l) {
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
    combineMaxSum(m, l, m2, l2);
  }
  if constexpr (TPR > 32) {
    __shared__ float sm[TPR / 32], sl[TPR / 32];
    const int w = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) sm[w] = m, sl[w] = l;
    __syncthreads();
    m = sm[0], l = sl[0];
    for (int k = 1; k < TPR / 32; ++k) combineMaxSum(m, l, sm[k], sl[k]);
    __syncthreads();
  }
}

template <int TPR> __device__ float reduceSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (TPR > 32) {
    __shared__ float s[TPR / 32];
    if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
    __syncthreads();
    v = 0.0f;
    for (int k = 0; k < TPR / 32; ++k) v += s[k];
    __syncthreads();
  }
  return v;
}

template <int TPR> constexpr int rowsPerBlock() { return TPR >= 256 ? 1 : 256 / TPR; }

struct SoftmaxArgs {
  const float *scores = nullptr; // [rows, T]: scale * Q K^T
  float *probs = nullptr;        // [rows, T] out (may be `scores`)
  float *tanhOut = nullptr;      // optional [rows, T]: tanh(score / softcap) (may be `scores` if probs is not)
  float *qk = nullptr;           // optional qk_matmul_output [rows, T]
  int qkMode = 0;
  int64_t rows = 0, T = 0, qSeq = 0, heads = 0;
  // A chunk of the stacked rows (chunkRows of each unit's unitRows, from
  // rowBegin on): row r of the buffers is row (r / chunkRows) * unitRows +
  // rowBegin + r % chunkRows of the whole [B * H * qSeq] (qk's rows).
  int64_t chunkRows = 0, unitRows = 0, rowBegin = 0; // chunkRows 0: the whole
  float softcap = 0.0f;
  BiasParams bias;
};

__device__ int64_t wholeRow(const SoftmaxArgs &a, int64_t row) {
  return a.chunkRows == 0 ? row : row / a.chunkRows * a.unitRows + a.rowBegin + row % a.chunkRows;
}

// P = softmax(softcap(S) + bias) per row, online max/sum in the first pass.
template <int TPR> __global__ void attentionSoftmaxKernel(SoftmaxArgs a) {
  constexpr int RPB = rowsPerBlock<TPR>();
  const int lane = threadIdx.x;
  for (int64_t row = int64_t(blockIdx.x) * RPB + threadIdx.y; row < a.rows; row += int64_t(gridDim.x) * RPB) {
    const int64_t whole = wholeRow(a, row);
    const int64_t b = whole / (a.heads * a.qSeq), h = (whole / a.qSeq) % a.heads, i = whole % a.qSeq;
    const RowBias rb = rowBias(a.bias, b, h, i, a.qSeq, a.T);
    const int64_t base = row * a.T, qkBase = whole * a.T;
    const float *in = a.scores + base;
    float *out = a.probs + base;
    float m = kNegInf, l = 0.0f;
    for (int64_t j = lane; j < a.T; j += TPR) {
      float s = in[j];
      if (a.qk && a.qkMode == 0) a.qk[qkBase + j] = s;
      if (a.softcap > 0.0f) {
        const float t = tanhf(s / a.softcap);
        if (a.tanhOut) a.tanhOut[base + j] = t;
        s = a.softcap * t;
      }
      if (a.qk && a.qkMode == 1) a.qk[qkBase + j] = s;
      s += biasAt(a.bias, rb, j);
      if (a.qk && a.qkMode == 2) a.qk[qkBase + j] = s;
      out[j] = s;
      if (s == kNegInf) continue;
      if (s > m) {
        l = l * expf(m - s) + 1.0f;
        m = s;
      } else {
        l += expf(s - m);
      }
    }
    reduceMaxSum<TPR>(m, l);
    const float inv = m == kNegInf ? 0.0f : 1.0f / l;
    for (int64_t j = lane; j < a.T; j += TPR) {
      const float p = m == kNegInf ? 0.0f : expf(out[j] - m) * inv;
      out[j] = p;
      if (a.qk && a.qkMode == 3) a.qk[qkBase + j] = p;
    }
  }
}

struct SoftmaxGradArgs {
  float *grad = nullptr;       // [rows, T]: dP in, dS out
  const float *probs = nullptr; // P
  const float *tanh = nullptr; // optional tanh(score / softcap)
  int64_t rows = 0, T = 0;
};

// dS = P * (dP - rowsum(dP * P)), times 1 - tanh^2 under a softcap.
template <int TPR> __global__ void attentionSoftmaxGradKernel(SoftmaxGradArgs a) {
  constexpr int RPB = rowsPerBlock<TPR>();
  const int lane = threadIdx.x;
  for (int64_t row = int64_t(blockIdx.x) * RPB + threadIdx.y; row < a.rows; row += int64_t(gridDim.x) * RPB) {
    const int64_t base = row * a.T;
    float *g = a.grad + base;
    const float *p = a.probs + base;
    float dot = 0.0f;
    for (int64_t j = lane; j < a.T; j += TPR) dot += g[j] * p[j];
    dot = reduceSum<TPR>(dot);
    for (int64_t j = lane; j < a.T; j += TPR) {
      float ds = p[j] * (g[j] - dot);
      if (a.tanh) {
        const float t = a.tanh[base + j];
        ds *= 1.0f - t * t;
      }
      g[j] = ds;
    }
  }
}

template <class Args>
llvm::Error launchRows(void (*narrow)(Args), void (*wide)(Args), const Args &args, int64_t rows, int64_t T,
                       cudaStream_t stream) {
  if (rows == 0 || T == 0) return llvm::Error::success();
  // A warp per row for short rows, a block of 256 threads per row otherwise.
  const bool useWide = T > 256;
  const int tpr = useWide ? 256 : 32, rpb = useWide ? rowsPerBlock<256>() : rowsPerBlock<32>();
  const int64_t blocks = std::min<int64_t>((rows + rpb - 1) / rpb, int64_t(1) << 30);
  const dim3 block{unsigned(tpr), unsigned(rpb), 1u};
  (useWide ? wide : narrow)<<<unsigned(blocks), block, 0, stream>>>(args);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

// dst [B, H, T, D] packed: rows t < P from `past` [B, H, P, D], the rest from
// `cur` ([B, T - P, H * D] when cur3D, else [B, H, T - P, D]).
__global__ void gatherHeadsKernel(float *dst, const float *past, const float *cur, bool cur3D, int64_t B, int64_t H,
                                  int64_t T, int64_t P, int64_t D) {
  const int64_t total = B * H * T * D, S = T - P;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = e % D, t = (e / D) % T, h = (e / (D * T)) % H, b = e / (D * T * H);
    if (t < P) {
      dst[e] = past[((b * H + h) * P + t) * D + d];
    } else {
      const int64_t s = t - P;
      dst[e] = cur3D ? cur[((b * S + s) * H + h) * D + d] : cur[((b * H + h) * S + s) * D + d];
    }
  }
}

// dst [B, S, H * D] from src [B, H, S, D].
__global__ void scatterHeadsKernel(float *dst, const float *src, int64_t B, int64_t H, int64_t S, int64_t D) {
  const int64_t total = B * H * S * D;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = e % D, h = (e / D) % H, s = (e / (D * H)) % S, b = e / (D * H * S);
    dst[e] = src[((b * H + h) * S + s) * D + d];
  }
}

llvm::Error gatherHeads(cudaStream_t stream, float *dst, const float *past, const float *cur, bool cur3D, int64_t B,
                        int64_t H, int64_t T, int64_t P, int64_t D) {
  const int64_t total = B * H * T * D;
  if (total == 0) return llvm::Error::success();
  gatherHeadsKernel<<<gridFor(total), 256, 0, stream>>>(dst, past, cur, cur3D, B, H, T, P, D);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

llvm::Error scatterHeads(cudaStream_t stream, float *dst, const float *src, int64_t B, int64_t H, int64_t S,
                         int64_t D) {
  const int64_t total = B * H * S * D;
  if (total == 0) return llvm::Error::success();
  scatterHeadsKernel<<<gridFor(total), 256, 0, stream>>>(dst, src, B, H, S, D);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

// --- Host side ---

// Which inputs hold what: Attention(Q, K, V, attn_mask, past_key, past_value,
// nonpad_kv_seqlen) and AttentionGrad(dY, Q, K, V, attn_mask, nonpad_kv_seqlen).
struct InputSlots {
  size_t q, k, v, mask, pastKey, pastValue, nonpad; // SIZE_MAX: no such input
};
constexpr size_t kNone = size_t(-1);
constexpr InputSlots kForwardSlots{0, 1, 2, 3, 4, 5, 6};
constexpr InputSlots kGradSlots{1, 2, 3, 4, kNone, kNone, 5};

const DeviceTensor *inputAt(const GpuKernelContext &ctx, size_t i) { return i == kNone ? nullptr : ctx.input(i); }

llvm::Expected<AttentionDims> dimsOf(llvm::StringRef op, const GpuKernelContext &ctx, const InputSlots &slots) {
  const DeviceTensor *q = inputAt(ctx, slots.q), *k = inputAt(ctx, slots.k), *v = inputAt(ctx, slots.v);
  if (!q || !k || !v) return gpuKernelError(op, "Q, K and V are required");
  cpu::AttentionInputShapes in;
  in.q = &q->shape, in.k = &k->shape, in.v = &v->shape;
  if (const DeviceTensor *t = inputAt(ctx, slots.mask)) in.mask = &t->shape;
  if (const DeviceTensor *t = inputAt(ctx, slots.pastKey)) in.pastKey = &t->shape;
  if (const DeviceTensor *t = inputAt(ctx, slots.pastValue)) in.pastValue = &t->shape;
  if (const DeviceTensor *t = inputAt(ctx, slots.nonpad)) in.nonpadKvSeqlen = &t->shape;
  auto d = cpu::attentionDims(ctx.attrs, in);
  if (!d) return gpuKernelError(op, llvm::toString(d.takeError()));
  return d;
}

llvm::Error checkTypes(llvm::StringRef op, const GpuKernelContext &ctx, const InputSlots &slots) {
  for (size_t i : {slots.q, slots.k, slots.v, slots.pastKey, slots.pastValue})
    if (const DeviceTensor *t = inputAt(ctx, i))
      if (t->dtype != DType::F32)
        return gpuKernelError(op, llvm::Twine("the CUDA kernel takes f32 Q/K/V, got ") + dtypeName(t->dtype));
  if (const DeviceTensor *m = inputAt(ctx, slots.mask))
    if (m->dtype != DType::Bool && m->dtype != DType::F32)
      return gpuKernelError(op, llvm::Twine("attn_mask must be bool or f32 on the GPU, got ") + dtypeName(m->dtype));
  if (const DeviceTensor *n = inputAt(ctx, slots.nonpad))
    if (n->dtype != DType::I64 && n->dtype != DType::I32)
      return gpuKernelError(op, llvm::Twine("nonpad_kv_seqlen must be int64 or int32, got ") + dtypeName(n->dtype));
  return llvm::Error::success();
}

BiasParams biasParams(const GpuKernelContext &ctx, const InputSlots &slots, const AttentionDims &d) {
  BiasParams p;
  if (const DeviceTensor *m = inputAt(ctx, slots.mask)) {
    p.mask = m->data;
    p.maskBool = m->dtype == DType::Bool;
    std::copy(d.mask4.begin(), d.mask4.end(), p.mask4);
  }
  if (const DeviceTensor *n = inputAt(ctx, slots.nonpad)) {
    p.nonpad = n->data;
    p.nonpad64 = n->dtype == DType::I64;
  }
  p.pastSeq = d.pastSeq;
  p.causal = d.causal;
  p.left = d.leftWindow;
  p.right = d.rightWindow;
  return p;
}

llvm::Error checkOutput(llvm::StringRef op, const DeviceTensor *t, const Shape &want, const char *what) {
  if (!t) return llvm::Error::success();
  if (t->dtype != DType::F32 || t->shape != want)
    return gpuKernelError(op, llvm::Twine(what) + " output is " + dtypeName(t->dtype) + shapeToString(t->shape) +
                                  ", expected f32" + shapeToString(want));
  return llvm::Error::success();
}

// What plan::runsFused calls plain operands: f32 Q, K, V (and dY), no
// attn_mask, past cache or nonpad_kv_seqlen, and (forward) no output but Y.
bool plainOperands(const GpuKernelContext &ctx, const InputSlots &slots, bool forward) {
  for (size_t i : {slots.mask, slots.pastKey, slots.pastValue, slots.nonpad})
    if (inputAt(ctx, i)) return false;
  for (size_t i : {slots.q, slots.k, slots.v})
    if (inputAt(ctx, i)->dtype != DType::F32) return false;
  if (!forward && (!ctx.input(0) || ctx.input(0)->dtype != DType::F32)) return false; // dY
  return !(forward && (ctx.output(1) || ctx.output(2) || ctx.output(3)));
}

// The problem as cuDNN's fused attention takes it, where the plan runs it
// fused (plan::runsFused, in the bf16 mode); cuDNN may still decline it at
// run time (no handle, no engine), and the materialized path then runs.
std::optional<SdpaShape> cudnnShape(const GpuKernelContext &ctx, const InputSlots &slots, const AttentionDims &d,
                                    bool forward) {
  if (ctx.gpu.mode != ComputeMode::BF16 || !plan::runsFused(d, plainOperands(ctx, slots, forward)))
    return std::nullopt;
  SdpaShape s;
  s.batch = d.batch, s.qHeads = d.qHeads, s.kvHeads = d.kvHeads, s.seq = d.qSeq;
  s.headDim = d.headSize, s.vHeadDim = d.vHeadSize;
  s.bshd = d.is3D, s.causal = d.causal, s.scale = float(d.scale);
  if (!cudnnSdpaShapeProblem(s).empty()) return std::nullopt;
  return s;
}

// --- Attention ---

// The rows of each (batch, kv head) unit the materialized path takes at
// once (plan::attentionChunkRows), with `matrices` score matrices.
int64_t chunkRowsFor(const AttentionDims &d, int64_t matrices) {
  return plan::attentionChunkRows(d.batch * d.kvHeads, (d.qHeads / d.kvHeads) * d.qSeq, d.totalSeq, matrices);
}
int64_t gradMatrices(const AttentionDims &d) { return 2 + (d.softcap > 0); }

struct ForwardBuffers {
  float *scores, *q, *k, *v, *y; // scores: one chunk, [B * KVH, rows, T]
  void *pack; // the bf16 mode's operand copies (plan::attentionPackBytes)
  size_t packBytes;
  int64_t rows; // per unit and chunk
};

// The bf16 mode packs every product's operands, as the MatMul kernels do:
// the op's own area holds what does not go in a free score matrix
// (plan::attentionPackBytes, of one chunk).
size_t packBytesFor(const GpuKernelContext &ctx, const AttentionDims &d, bool grad, int64_t rows) {
  if (ctx.gpu.mode != ComputeMode::BF16) return 0;
  return size_t(plan::attentionPackBytes(d.batch, d.kvHeads, d.kvHeads, rows, d.totalSeq, d.headSize, d.vHeadSize,
                                         grad));
}

// A product packs A and B (elemsA, elemsB elements as stored) in `spare`, an
// fp32 buffer of spareElems that nothing uses during it, where they fit, else
// in the op's own area: the choice plan::attentionPackBytes counts on.
void packIn(LtGemm &g, int64_t elemsA, int64_t elemsB, float *spare, int64_t spareElems, void *own, size_t ownBytes) {
  if (spare && plan::bf16PackBytes(elemsA, elemsB) <= 4 * spareElems)
    g.scratch = spare, g.scratchBytes = size_t(4 * spareElems);
  else
    g.scratch = own, g.scratchBytes = ownBytes;
}

// In plan::materializedAttentionBytes's order: one chunk's scores; packed Q
// and Y for 3-D inputs; packed K/V for 3-D inputs or a past cache
// (present_key/present_value are used instead when requested, but the space
// is reserved regardless so the size does not depend on them); the bf16
// copies.
ForwardBuffers carveForward(WorkspaceCarver &c, const GpuKernelContext &ctx, const AttentionDims &d) {
  const bool packKV = d.is3D || d.pastSeq > 0;
  ForwardBuffers f;
  f.rows = chunkRowsFor(d, 1);
  f.scores = c.take(d.batch * d.kvHeads * f.rows * d.totalSeq);
  f.q = d.is3D ? c.take(d.batch * d.qHeads * d.qSeq * d.headSize) : nullptr;
  f.k = packKV ? c.take(d.batch * d.kvHeads * d.totalSeq * d.headSize) : nullptr;
  f.v = packKV ? c.take(d.batch * d.kvHeads * d.totalSeq * d.vHeadSize) : nullptr;
  f.y = d.is3D ? c.take(d.batch * d.qHeads * d.qSeq * d.vHeadSize) : nullptr;
  f.packBytes = packBytesFor(ctx, d, false, f.rows);
  f.pack = f.packBytes ? c.take<char>(int64_t(f.packBytes)) : nullptr;
  return f;
}

// The cuDNN path's bytes where it will run (the plan runs the problem fused
// and cuDNN, asked through ctx's handle, has an engine: its plans are built
// here), else the materialized path's. GpuProgram::prepare asks with the
// trainer's handles, so the workspace is what the path taken needs.
size_t attentionWorkspace(const GpuKernelContext &ctx) {
  auto d = dimsOf("Attention", ctx, kForwardSlots);
  if (!d) {
    llvm::consumeError(d.takeError());
    return 0;
  }
  if (auto s = cudnnShape(ctx, kForwardSlots, *d, true))
    if (size_t n = cudnnSdpaWorkspace(ctx.gpu, *s, false)) return n;
  WorkspaceCarver c(nullptr);
  carveForward(c, ctx, *d);
  return c.used();
}

// K or V as packed [B, kv_heads, total, dim] into *out: the input itself (4-D,
// no past), else gathered into `present` (when requested) or `scratch`.
llvm::Error packKV(GpuKernelContext &ctx, const AttentionDims &d, const DeviceTensor &cur, const DeviceTensor *past,
                   DeviceTensor *present, float *scratch, int64_t dim, const float **out) {
  const cudaStream_t stream = ctx.gpu.stream;
  if (!d.is3D && !past) {
    if (present && present->data != cur.data && cur.nbytes())
      MEGAC_CUDA_TRY(cudaMemcpyAsync(present->data, cur.data, cur.nbytes(), cudaMemcpyDeviceToDevice, stream));
    *out = cur.as<const float>();
    return llvm::Error::success();
  }
  float *dst = present ? present->as<float>() : scratch;
  *out = dst;
  return gatherHeads(stream, dst, past ? past->as<const float>() : nullptr, cur.as<const float>(), d.is3D, d.batch,
                     d.kvHeads, d.totalSeq, d.pastSeq, dim);
}

llvm::Error attentionKernel(GpuKernelContext &ctx) {
  const llvm::StringRef op = "Attention";
  const InputSlots &slots = kForwardSlots;
  auto dims = dimsOf(op, ctx, slots);
  if (!dims) return dims.takeError();
  const AttentionDims &d = *dims;
  if (auto e = checkTypes(op, ctx, slots)) return e;
  DeviceTensor *y = ctx.output(0), *presentK = ctx.output(1), *presentV = ctx.output(2), *qk = ctx.output(3);
  if (!y) return gpuKernelError(op, "output Y is missing");
  if (auto e = checkOutput(op, y, d.yShape, "Y")) return e;
  if (auto e = checkOutput(op, presentK, d.presentKeyShape, "present_key")) return e;
  if (auto e = checkOutput(op, presentV, d.presentValueShape, "present_value")) return e;
  if (auto e = checkOutput(op, qk, d.qkShape, "qk_matmul_output")) return e;
  if (auto s = cudnnShape(ctx, slots, d, true)) {
    const SdpaSource source{ctx.input(slots.q), ctx.input(slots.k), ctx.input(slots.v)};
    auto ran = cudnnSdpaForward(ctx.gpu, *s, ctx.input(slots.q)->as<const float>(),
                                ctx.input(slots.k)->as<const float>(), ctx.input(slots.v)->as<const float>(),
                                y->as<float>(), ctx.workspace, ctx.workspaceBytes, &source);
    if (!ran) return gpuKernelError(op, llvm::toString(ran.takeError()));
    if (*ran) return llvm::Error::success();
  }
  WorkspaceCarver carver(ctx.workspace);
  const ForwardBuffers buf = carveForward(carver, ctx, d);
  if (carver.used() > ctx.workspaceBytes) return gpuKernelError(op, "workspace is smaller than asked for");

  const cudaStream_t stream = ctx.gpu.stream;
  const int64_t B = d.batch, H = d.qHeads, KVH = d.kvHeads, S = d.qSeq, T = d.totalSeq, D = d.headSize,
                Dv = d.vHeadSize;
  const int64_t G = (H / KVH) * S; // the stacked rows of one kv head's q heads
  const DeviceTensor &q = *ctx.input(slots.q), &k = *ctx.input(slots.k), &v = *ctx.input(slots.v);
  const float *q4 = q.as<const float>();
  if (d.is3D) {
    if (auto e = gatherHeads(stream, buf.q, nullptr, q4, true, B, H, S, 0, D)) return e;
    q4 = buf.q;
  }
  const float *k4 = nullptr, *v4 = nullptr;
  if (auto e = packKV(ctx, d, k, inputAt(ctx, slots.pastKey), presentK, buf.k, D, &k4)) return e;
  if (auto e = packKV(ctx, d, v, inputAt(ctx, slots.pastValue), presentV, buf.v, Dv, &v4)) return e;
  float *y4 = d.is3D ? buf.y : y->as<float>();

  // Rows [r0, r0 + n) of every unit at a time (all of them where they fit).
  for (int64_t r0 = 0; r0 < G; r0 += buf.rows) {
    const int64_t n = std::min(buf.rows, G - r0);
    LtGemm scores;
    scores.m = n, scores.n = T, scores.k = D, scores.batch = B * KVH;
    scores.a = q4 + r0 * D, scores.lda = D, scores.strideA = G * D;
    scores.b = k4, scores.ldb = D, scores.strideB = T * D, scores.transB = true;
    scores.c = buf.scores, scores.ldc = T, scores.strideC = n * T;
    scores.alpha = float(d.scale);
    scores.scratch = buf.pack, scores.scratchBytes = buf.packBytes;
    if (auto e = ltMatmul(ctx.gpu, scores)) return e;

    SoftmaxArgs sm;
    sm.scores = buf.scores, sm.probs = buf.scores;
    sm.qk = qk ? qk->as<float>() : nullptr, sm.qkMode = int(d.qkMode);
    sm.rows = B * KVH * n, sm.T = T, sm.qSeq = S, sm.heads = H;
    if (n < G) sm.chunkRows = n, sm.unitRows = G, sm.rowBegin = r0;
    sm.softcap = d.softcap;
    sm.bias = biasParams(ctx, slots, d);
    if (auto e = launchRows(attentionSoftmaxKernel<32>, attentionSoftmaxKernel<256>, sm, sm.rows, T, stream))
      return e;

    LtGemm pv;
    pv.m = n, pv.n = Dv, pv.k = T, pv.batch = B * KVH;
    pv.a = buf.scores, pv.lda = T, pv.strideA = n * T;
    pv.b = v4, pv.ldb = Dv, pv.strideB = T * Dv;
    pv.c = y4 + r0 * Dv, pv.ldc = Dv, pv.strideC = G * Dv;
    pv.scratch = buf.pack, pv.scratchBytes = buf.packBytes;
    if (auto e = ltMatmul(ctx.gpu, pv)) return e;
  }
  if (d.is3D) return scatterHeads(stream, y->as<float>(), y4, B, H, S, Dv);
  return llvm::Error::success();
}

// --- megac.AttentionGrad ---

struct GradBuffers {
  float *probs, *dP, *tanh;     // one chunk, [B * KVH, rows, T]; tanh only under a softcap
  float *q, *k, *v, *dO;        // packed inputs (3-D only)
  float *dQ, *dK, *dV;          // packed gradients (3-D only)
  void *pack;                   // the bf16 mode's operand copies
  size_t packBytes;
  int64_t rows;                 // per unit and chunk
};

// In plan::materializedAttentionBytes's order.
GradBuffers carveGrad(WorkspaceCarver &c, const GpuKernelContext &ctx, const AttentionDims &d) {
  const int64_t B = d.batch, H = d.qHeads, KVH = d.kvHeads, S = d.qSeq, T = d.totalSeq;
  GradBuffers g{};
  g.rows = chunkRowsFor(d, gradMatrices(d));
  const int64_t chunk = B * KVH * g.rows * T;
  g.probs = c.take(chunk);
  g.dP = c.take(chunk);
  g.tanh = d.softcap > 0 ? c.take(chunk) : nullptr;
  if (d.is3D) {
    g.q = c.take(B * H * S * d.headSize);
    g.k = c.take(B * KVH * T * d.headSize);
    g.v = c.take(B * KVH * T * d.vHeadSize);
    g.dO = c.take(B * H * S * d.vHeadSize);
    g.dQ = c.take(B * H * S * d.headSize);
    g.dK = c.take(B * KVH * T * d.headSize);
    g.dV = c.take(B * KVH * T * d.vHeadSize);
  }
  g.packBytes = packBytesFor(ctx, d, true, g.rows);
  g.pack = g.packBytes ? c.take<char>(int64_t(g.packBytes)) : nullptr;
  return g;
}

// As attentionWorkspace.
size_t attentionGradWorkspace(const GpuKernelContext &ctx) {
  auto d = dimsOf("megac.AttentionGrad", ctx, kGradSlots);
  if (!d) {
    llvm::consumeError(d.takeError());
    return 0;
  }
  if (auto s = cudnnShape(ctx, kGradSlots, *d, false))
    if (size_t n = cudnnSdpaWorkspace(ctx.gpu, *s, true)) return n;
  WorkspaceCarver c(nullptr);
  carveGrad(c, ctx, *d);
  return c.used();
}

// nonpad_kv_seqlen must lie in [0, total]; checked where it is a plan constant
// (a device-only tensor is clamped by the masking instead).
llvm::Error checkNonpad(llvm::StringRef op, const GpuKernelContext &ctx, size_t slot, const AttentionDims &d) {
  const Tensor *n = slot == kNone ? nullptr : ctx.constant(slot);
  if (!n) return llvm::Error::success();
  for (int64_t b = 0; b < d.batch && b < n->numel(); ++b)
    if (n->getAsInt(b) < 0 || n->getAsInt(b) > d.totalSeq)
      return gpuKernelError(op, "nonpad_kv_seqlen[" + llvm::Twine(b) + "] = " + llvm::Twine(n->getAsInt(b)) +
                                    " is outside [0, " + llvm::Twine(d.totalSeq) + "]");
  return llvm::Error::success();
}

llvm::Error attentionGradKernel(GpuKernelContext &ctx) {
  const llvm::StringRef op = "megac.AttentionGrad";
  const InputSlots &slots = kGradSlots;
  const DeviceTensor *dy = ctx.input(0);
  if (!dy) return gpuKernelError(op, "dY, Q, K and V are required");
  auto dims = dimsOf(op, ctx, slots);
  if (!dims) return dims.takeError();
  const AttentionDims &d = *dims;
  if (auto e = checkTypes(op, ctx, slots)) return e;
  if (dy->dtype != DType::F32 || dy->shape != d.yShape)
    return gpuKernelError(op, "dY is " + llvm::Twine(dtypeName(dy->dtype)) + shapeToString(dy->shape) +
                                  ", expected f32" + shapeToString(d.yShape));
  const DeviceTensor &q = *ctx.input(slots.q), &k = *ctx.input(slots.k), &v = *ctx.input(slots.v);
  DeviceTensor *dq = ctx.output(0), *dk = ctx.output(1), *dv = ctx.output(2);
  if (auto e = checkOutput(op, dq, q.shape, "dQ")) return e;
  if (auto e = checkOutput(op, dk, k.shape, "dK")) return e;
  if (auto e = checkOutput(op, dv, v.shape, "dV")) return e;
  if (auto e = checkNonpad(op, ctx, slots.nonpad, d)) return e;
  // Q, K and V's bytes may hold others by now (runtime/plan/AttentionStash.h).
  const bool operandsStashed = ctx.attrs.getInt(plan::kStashedOperandsAttr, 0) != 0;
  if (auto s = cudnnShape(ctx, slots, d, false)) {
    const SdpaSource source{&q, &k, &v};
    auto ran = cudnnSdpaBackward(ctx.gpu, *s, dy->as<const float>(), q.as<const float>(), k.as<const float>(),
                                 v.as<const float>(), dq ? dq->as<float>() : nullptr, dk ? dk->as<float>() : nullptr,
                                 dv ? dv->as<float>() : nullptr, ctx.workspace, ctx.workspaceBytes, &source,
                                 operandsStashed);
    if (!ran) return gpuKernelError(op, llvm::toString(ran.takeError()));
    if (*ran) return llvm::Error::success();
  }
  if (operandsStashed) {
    const std::string why = cudnnAttentionStats().lastFallback;
    return gpuKernelError(op, "the plan ended Q, K and V at the forward, counting on cuDNN's fused attention and "
                              "its stash, which did not run this problem (" +
                                  llvm::Twine(why.empty() ? "not in bf16 mode, or sizes it does not take" : why) + ")");
  }
  WorkspaceCarver carver(ctx.workspace);
  const GradBuffers buf = carveGrad(carver, ctx, d);
  if (carver.used() > ctx.workspaceBytes) return gpuKernelError(op, "workspace is smaller than asked for");

  const cudaStream_t stream = ctx.gpu.stream;
  const int64_t B = d.batch, H = d.qHeads, KVH = d.kvHeads, S = d.qSeq, T = d.totalSeq, D = d.headSize,
                Dv = d.vHeadSize;
  const int64_t G = (H / KVH) * S, batch = B * KVH;
  const float scale = float(d.scale);
  const float *q4 = q.as<const float>(), *k4 = k.as<const float>(), *v4 = v.as<const float>(),
              *dO4 = dy->as<const float>();
  if (d.is3D) {
    if (auto e = gatherHeads(stream, buf.q, nullptr, q4, true, B, H, S, 0, D)) return e;
    if (auto e = gatherHeads(stream, buf.k, nullptr, k4, true, B, KVH, T, 0, D)) return e;
    if (auto e = gatherHeads(stream, buf.v, nullptr, v4, true, B, KVH, T, 0, Dv)) return e;
    if (auto e = gatherHeads(stream, buf.dO, nullptr, dO4, true, B, H, S, 0, Dv)) return e;
    q4 = buf.q, k4 = buf.k, v4 = buf.v, dO4 = buf.dO;
  }
  float *dQ4 = d.is3D ? buf.dQ : dq ? dq->as<float>() : nullptr;
  float *dK4 = d.is3D ? buf.dK : dk ? dk->as<float>() : nullptr;
  float *dV4 = d.is3D ? buf.dV : dv ? dv->as<float>() : nullptr;

  // Rows [r0, r0 + n) of every unit at a time (all of them where they fit);
  // dK and dV sum over the chunks. The free score matrix a product packs in
  // is a whole chunk's (`spare` elements), whatever its rows.
  const int64_t spare = batch * buf.rows * T;
  for (int64_t r0 = 0; r0 < G; r0 += buf.rows) {
    const int64_t n = std::min(buf.rows, G - r0), chunk = batch * n * T;
    const float accumulate = r0 == 0 ? 0.0f : 1.0f;
    // P, recomputed as in the forward pass (raw scores go to the tanh buffer
    // under a softcap, which then holds tanh(score / softcap)).
    LtGemm scores;
    scores.m = n, scores.n = T, scores.k = D, scores.batch = batch;
    scores.a = q4 + r0 * D, scores.lda = D, scores.strideA = G * D;
    scores.b = k4, scores.ldb = D, scores.strideB = T * D, scores.transB = true;
    scores.c = buf.tanh ? buf.tanh : buf.probs, scores.ldc = T, scores.strideC = n * T;
    scores.alpha = scale;
    packIn(scores, batch * n * D, batch * T * D, buf.dP, spare, buf.pack, buf.packBytes);
    if (auto e = ltMatmul(ctx.gpu, scores)) return e;
    SoftmaxArgs sm;
    sm.scores = scores.c, sm.probs = buf.probs, sm.tanhOut = buf.tanh;
    sm.rows = batch * n, sm.T = T, sm.qSeq = S, sm.heads = H;
    if (n < G) sm.chunkRows = n, sm.unitRows = G, sm.rowBegin = r0;
    sm.softcap = d.softcap;
    sm.bias = biasParams(ctx, slots, d);
    if (auto e = launchRows(attentionSoftmaxKernel<32>, attentionSoftmaxKernel<256>, sm, sm.rows, T, stream))
      return e;

    if (dV4) { // dV = P^T dO (the group's q heads summed by the reduction)
      LtGemm g;
      g.m = T, g.n = Dv, g.k = n, g.batch = batch;
      g.a = buf.probs, g.lda = T, g.strideA = n * T, g.transA = true;
      g.b = dO4 + r0 * Dv, g.ldb = Dv, g.strideB = G * Dv;
      g.c = dV4, g.ldc = Dv, g.strideC = T * Dv, g.beta = accumulate;
      packIn(g, chunk, batch * n * Dv, buf.dP, spare, buf.pack, buf.packBytes); // P^T dO, before dP
      if (auto e = ltMatmul(ctx.gpu, g)) return e;
    }
    if (dQ4 || dK4) {
      LtGemm g; // dP = dO V^T
      g.m = n, g.n = T, g.k = Dv, g.batch = batch;
      g.a = dO4 + r0 * Dv, g.lda = Dv, g.strideA = G * Dv;
      g.b = v4, g.ldb = Dv, g.strideB = T * Dv, g.transB = true;
      g.c = buf.dP, g.ldc = T, g.strideC = n * T;
      packIn(g, batch * n * Dv, batch * T * Dv, nullptr, 0, buf.pack, buf.packBytes); // dO V^T
      if (auto e = ltMatmul(ctx.gpu, g)) return e;
      SoftmaxGradArgs sg;
      sg.grad = buf.dP, sg.probs = buf.probs, sg.tanh = buf.tanh, sg.rows = batch * n, sg.T = T;
      if (auto e =
              launchRows(attentionSoftmaxGradKernel<32>, attentionSoftmaxGradKernel<256>, sg, sg.rows, T, stream))
        return e;
    }
    if (dQ4) { // dQ = scale dS K
      LtGemm g;
      g.m = n, g.n = D, g.k = T, g.batch = batch;
      g.a = buf.dP, g.lda = T, g.strideA = n * T;
      g.b = k4, g.ldb = D, g.strideB = T * D;
      g.c = dQ4 + r0 * D, g.ldc = D, g.strideC = G * D;
      g.alpha = scale;
      packIn(g, chunk, batch * T * D, buf.probs, spare, buf.pack, buf.packBytes); // dS K, P no longer read
      if (auto e = ltMatmul(ctx.gpu, g)) return e;
    }
    if (dK4) { // dK = scale dS^T Q
      LtGemm g;
      g.m = T, g.n = D, g.k = n, g.batch = batch;
      g.a = buf.dP, g.lda = T, g.strideA = n * T, g.transA = true;
      g.b = q4 + r0 * D, g.ldb = D, g.strideB = G * D;
      g.c = dK4, g.ldc = D, g.strideC = T * D, g.beta = accumulate;
      g.alpha = scale;
      packIn(g, chunk, batch * n * D, buf.probs, spare, buf.pack, buf.packBytes); // dS^T Q
      if (auto e = ltMatmul(ctx.gpu, g)) return e;
    }
  }
  if (d.is3D) {
    if (dq)
      if (auto e = scatterHeads(stream, dq->as<float>(), dQ4, B, H, S, D)) return e;
    if (dk)
      if (auto e = scatterHeads(stream, dk->as<float>(), dK4, B, KVH, T, D)) return e;
    if (dv)
      if (auto e = scatterHeads(stream, dv->as<float>(), dV4, B, KVH, T, Dv)) return e;
  }
  return llvm::Error::success();
}

} // namespace

void registerAttentionGpuKernels() {
  registerGpuKernel("Attention", attentionKernel, attentionWorkspace);
  registerGpuKernel("megac.AttentionGrad", attentionGradKernel, attentionGradWorkspace);
}

} // namespace megac::cuda
