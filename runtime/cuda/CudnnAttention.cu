// Fused attention through cuDNN's backend graph API (see CudnnAttention.h).
// The operation graphs mirror cudnn-frontend's composite sdpa and
// sdpa_backward nodes for cuDNN 9.x before 9.21 (no bias, dropout, padding or
// ragged tensors), which cuDNN matches to its fused flash-attention engines:
//
//   forward   S = MATMUL(Q, K^T) * scale; causal: BINARY_SELECT(S, -inf,
//             GEN_INDEX(row) >= GEN_INDEX(col)); M = max(S), E = exp(S - M),
//             L = sum(E), Stats = M + log(L); O = MATMUL(E / L, V)
//   backward  Dsum = sum(dO * O); P = exp(masked(scale Q K^T) - Stats);
//             dV = P^T dO; dS = scale * P * (dO V^T - Dsum); dK = dS^T Q;
//             dQ = IDENTITY(dQacc = dS K)
//
// with K (and V in the backward) described transposed by strides, GQA by K/V
// tensors with fewer heads (dK/dV reduced over each group), bf16 I/O, f32
// virtual intermediates and compute. Stats, the row sums Dsum and the f32 dQ
// accumulator are real tensors that live in the kernel's workspace.
#include "runtime/cuda/CudnnAttention.h"

#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/LtMatmul.h"
#include "runtime/cuda/WorkspaceCarver.h"
#include "runtime/plan/FusedAttention.h"

#include "llvm/Support/raw_ostream.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace megac::cuda {

#ifdef MEGAC_HAS_CUDNN

namespace {

llvm::Error err(const std::string &msg) { return llvm::createStringError(llvm::inconvertibleErrorCode(), msg); }

std::string describe(const SdpaShape &s, bool backward) {
  return std::string(backward ? "backward" : "forward") + " [B=" + std::to_string(s.batch) +
         ", Hq=" + std::to_string(s.qHeads) + ", Hkv=" + std::to_string(s.kvHeads) + ", S=" + std::to_string(s.seq) +
         ", D=" + std::to_string(s.headDim) + ", Dv=" + std::to_string(s.vHeadDim) + (s.bshd ? ", BSHD" : "") +
         (s.causal ? ", causal" : "") + "]";
}

// --- f32 <-> bf16 conversions ---

constexpr int kMaxSegments = 4;

// At most kMaxSegments buffers; empty ones are skipped.
struct ConvertBatch {
  const void *src[kMaxSegments] = {};
  void *dst[kMaxSegments] = {};
  int64_t n[kMaxSegments] = {};
  int count = 0;

  void add(const void *s, void *d, int64_t len) {
    if (!s || !d || len <= 0) return;
    src[count] = s, dst[count] = d, n[count] = len;
    ++count;
  }
};

// Each buffer with the products' packing kernels (LtMatmul.h: round to
// nearest even, and back exactly), one launch a buffer. One launch for all
// of them, blockIdx.y picking the buffer from an array in the kernel's
// parameters, ran at a seventh of the memory's bandwidth (an H100, ncu:
// 1.17 ms for the 2.8B bench's Q, K and V, where the packing kernel moves
// as many bytes in 0.17 ms).
llvm::Error convertToBf16(cudaStream_t stream, const ConvertBatch &b) {
  for (int i = 0; i < b.count; ++i)
    if (auto e = packBf16On(stream, b.dst[i], static_cast<const float *>(b.src[i]), b.n[i])) return e;
  return llvm::Error::success();
}

llvm::Error convertToF32(cudaStream_t stream, const ConvertBatch &b) {
  for (int i = 0; i < b.count; ++i)
    if (auto e = unpackBf16On(stream, static_cast<float *>(b.dst[i]), b.src[i], b.n[i])) return e;
  return llvm::Error::success();
}

// --- Workspace layout ---

struct Buffers {
  __nv_bfloat16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr; // bf16 copies, the layout of the f32 ones
  __nv_bfloat16 *dO = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  float *stats = nullptr;   // [B, Hq, S, 1]
  float *rowSum = nullptr;  // [B, Hq, S, 1]: sum(dO * O), backward
  float *dqAccum = nullptr; // [B, Hq, S, D], backward
  void *dnn = nullptr;      // cuDNN's own workspace
};

// The bf16 copies of Q, K, V and O and the stats: what a forward leaves for
// its gradient (plan::fusedAttentionStashBytes).
void carveForwardResidue(WorkspaceCarver &c, const SdpaShape &s, Buffers &b) {
  const int64_t B = s.batch, H = s.qHeads, K = s.kvHeads, S = s.seq, D = s.headDim, Dv = s.vHeadDim;
  b.q = c.take<__nv_bfloat16>(B * H * S * D);
  b.k = c.take<__nv_bfloat16>(B * K * S * D);
  b.v = c.take<__nv_bfloat16>(B * K * S * Dv);
  b.o = c.take<__nv_bfloat16>(B * H * S * Dv);
  b.stats = c.take<float>(B * H * S);
}

void carveGradient(WorkspaceCarver &c, const SdpaShape &s, Buffers &b) {
  const int64_t B = s.batch, H = s.qHeads, K = s.kvHeads, S = s.seq, D = s.headDim, Dv = s.vHeadDim;
  b.dO = c.take<__nv_bfloat16>(B * H * S * Dv);
  b.dq = c.take<__nv_bfloat16>(B * H * S * D);
  b.dk = c.take<__nv_bfloat16>(B * K * S * D);
  b.dv = c.take<__nv_bfloat16>(B * K * S * Dv);
  b.rowSum = c.take<float>(B * H * S);
  b.dqAccum = c.take<float>(B * H * S * D);
}

// Everything in the workspace, in plan::fusedAttentionWorkspaceBytes's order.
Buffers carve(WorkspaceCarver &c, const SdpaShape &s, bool backward, int64_t dnnBytes) {
  Buffers b;
  carveForwardResidue(c, s, b);
  if (backward) carveGradient(c, s, b);
  b.dnn = c.take<char>(dnnBytes);
  return b;
}

// --- cuDNN errors ---

std::string dnnStatusText(cudnnStatus_t s) {
  char detail[1024] = "";
  cudnnGetLastErrorString(detail, sizeof detail);
  std::string text = cudnnGetErrorString(s);
  if (detail[0]) text += std::string(" (") + detail + ")";
  return text;
}

llvm::Error dnnFailure(cudnnStatus_t s, const char *call) {
  return err(std::string("cuDNN error in ") + call + ": " + dnnStatusText(s));
}

#define MEGAC_CUDNN_TRY(call)                                                                                    \
  do {                                                                                                           \
    cudnnStatus_t megac_s_ = (call);                                                                             \
    if (megac_s_ != CUDNN_STATUS_SUCCESS) return dnnFailure(megac_s_, #call);                                    \
  } while (0)

// --- Graph building ---

using Desc = cudnnBackendDescriptor_t;
using Dims = std::array<int64_t, 4>;

// Non-virtual tensors; virtual ones are numbered from kFirstVirtual.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kNegInf, kDO, kDQ, kDK, kDV, kRowSum, kDQAccum, kOne,
  kFirstVirtual = 100,
};

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT, kBF16 = CUDNN_DATA_BFLOAT16;

Dims packedStrides(const Dims &d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

// Strides of a [B, heads, S, dim] I/O tensor: packed, or [B, S, heads * dim].
Dims ioStrides(const SdpaShape &s, int64_t heads, int64_t dim) {
  if (s.bshd) return {s.seq * heads * dim, dim, heads * dim, 1};
  return {heads * s.seq * dim, s.seq * dim, dim, 1};
}

Dims swapLast(Dims d) {
  std::swap(d[2], d[3]);
  return d;
}

// Makes and owns the backend descriptors of one graph and, once planned, its
// execution plan. The first failure is kept and later calls do nothing, so a
// graph reads straight through; failure() says what went wrong.
class GraphBuilder {
public:
  explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}
  GraphBuilder(const GraphBuilder &) = delete;
  GraphBuilder &operator=(const GraphBuilder &) = delete;
  ~GraphBuilder() {
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  }

  Desc tensor(int64_t uid, cudnnDataType_t type, const Dims &dims, const Dims &strides, bool isVirtual = false,
              bool byValue = false) {
    Desc t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &isVirtual);
    if (byValue) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byValue);
    finalize(t, "tensor");
    return t;
  }
  // An f32 scalar passed by value (a host pointer in the variant pack).
  Desc scalar(int64_t uid) { return tensor(uid, kF32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true); }
  Desc virt(cudnnDataType_t type, const Dims &dims, const Dims &strides) {
    return tensor(nextVirtual_++, type, dims, strides, true);
  }

  void matmul(Desc a, Desc b, Desc c) {
    Desc m = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &kF32);
    finalize(m, "matmul descriptor");
    Desc op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, m);
    addOp(op, "matmul");
  }

  // y = mode(x[, b]) or, for BINARY_SELECT, t ? x : b. axis: GEN_INDEX's.
  void pointwise(cudnnPointwiseMode_t mode, Desc x, Desc b, Desc y, cudnnDataType_t prec = kF32, Desc t = nullptr,
                 int64_t axis = -1) {
    Desc pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(pw, "pointwise descriptor");
    Desc op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    const float one = 1.0f;
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    addOp(op, "pointwise");
  }

  void reduction(cudnnReduceTensorOp_t mode, Desc x, Desc y) {
    Desc r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &kF32);
    finalize(r, "reduction descriptor");
    Desc op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
    addOp(op, "reduction");
  }

  void reshape(Desc x, Desc y) {
    Desc op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    setDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    addOp(op, "reshape");
  }

  // The operation graph and the first engine configuration (heuristic mode
  // A, then the fallback list) that finalizes as an execution plan. Null,
  // with failure() saying why, where there is none.
  Desc plan(int64_t *workspace) {
    Desc graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops_.size()), ops_.data());
    // Deprecated in cuDNN 9 but still honored; its status is not checked.
    if (graph) cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
    finalize(graph, "operation graph");
    if (!failure_.empty()) return nullptr;
    std::string tried;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK})
      if (Desc p = planFromHeuristic(graph, mode, workspace, &tried)) return p;
    failure_ = "no engine for this graph" + (tried.empty() ? std::string() : " (" + tried + ")");
    return nullptr;
  }

  const std::string &failure() const { return failure_; }

private:
  Desc make(cudnnBackendDescriptorType_t type) {
    if (!failure_.empty()) return nullptr;
    Desc d = nullptr;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(type, &d);
    if (s != CUDNN_STATUS_SUCCESS) {
      failure_ = "cudnnBackendCreateDescriptor(" + std::to_string(int(type)) + "): " + dnnStatusText(s);
      return nullptr;
    }
    owned_.push_back(d);
    return d;
  }
  void set(Desc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void *value) {
    if (!failure_.empty() || !d) return;
    cudnnStatus_t s = cudnnBackendSetAttribute(d, name, type, count, value);
    if (s != CUDNN_STATUS_SUCCESS)
      failure_ = "cudnnBackendSetAttribute(attribute " + std::to_string(int(name)) + "): " + dnnStatusText(s);
  }
  void setDesc(Desc d, cudnnBackendAttributeName_t name, Desc value) {
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
  }
  void finalize(Desc d, const char *what) {
    if (!failure_.empty() || !d) return;
    cudnnStatus_t s = cudnnBackendFinalize(d);
    if (s != CUDNN_STATUS_SUCCESS) failure_ = std::string("finalizing the ") + what + ": " + dnnStatusText(s);
  }
  void addOp(Desc op, const char *what) {
    finalize(op, what);
    if (failure_.empty()) ops_.push_back(op);
  }

  // Engine configurations of one heuristic mode, tried in order.
  Desc planFromHeuristic(Desc graph, cudnnBackendHeurMode_t mode, int64_t *workspace, std::string *tried) {
    Desc heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    finalize(heur, "engine heuristic");
    int64_t count = 0;
    if (failure_.empty())
      cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
    std::vector<Desc> configs;
    for (int64_t i = 0; i < count; ++i) configs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    if (count > 0 && failure_.empty())
      cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                               configs.data());
    if (!failure_.empty()) { // a heuristic mode that does not apply: try the next one
      *tried += (tried->empty() ? "" : "; ") + failure_;
      failure_.clear();
      return nullptr;
    }
    for (int64_t i = 0; i < count; ++i) {
      Desc p = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      if (!p) return nullptr;
      cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_); // deprecated
      set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configs[size_t(i)]);
      cudnnStatus_t s = failure_.empty() ? cudnnBackendFinalize(p) : CUDNN_STATUS_BAD_PARAM;
      if (s == CUDNN_STATUS_SUCCESS) {
        int64_t n = 0;
        s = cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, workspace);
        if (s == CUDNN_STATUS_SUCCESS) return p;
      }
      *tried += (tried->empty() ? "" : "; ") + std::string("engine config ") + std::to_string(i) + ": " +
                (failure_.empty() ? dnnStatusText(s) : failure_);
      failure_.clear();
    }
    return nullptr;
  }

  cudnnHandle_t handle_;
  std::vector<Desc> owned_, ops_;
  int64_t nextVirtual_ = kFirstVirtual;
  std::string failure_;
};

// x where key column <= query row, else -inf (top-left causal).
Desc causalMask(GraphBuilder &g, Desc x, const Dims &dims, const Dims &strides) {
  Desc row = g.virt(CUDNN_DATA_INT32, dims, strides), col = g.virt(CUDNN_DATA_INT32, dims, strides);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, row, kF32, nullptr, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, col, kF32, nullptr, 3);
  Desc keep = g.virt(CUDNN_DATA_BOOLEAN, dims, strides);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, keep, CUDNN_DATA_BOOLEAN);
  Desc y = g.virt(kF32, dims, strides);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, g.scalar(kNegInf), y, kF32, keep);
  return y;
}

void buildForward(GraphBuilder &g, const SdpaShape &s) {
  const int64_t B = s.batch, H = s.qHeads, K = s.kvHeads, S = s.seq, D = s.headDim, Dv = s.vHeadDim;
  const Dims sDims{B, H, S, S}, sStr = packedStrides(sDims), rDims{B, H, S, 1}, rStr{H * S, S, 1, 1};
  Desc q = g.tensor(kQ, kBF16, {B, H, S, D}, ioStrides(s, H, D));
  Desc kT = g.tensor(kK, kBF16, {B, K, D, S}, swapLast(ioStrides(s, K, D)));
  Desc v = g.tensor(kV, kBF16, {B, K, S, Dv}, ioStrides(s, K, Dv));
  Desc o = g.tensor(kO, kBF16, {B, H, S, Dv}, ioStrides(s, H, Dv));
  Desc stats = g.tensor(kStats, kF32, rDims, rStr);

  Desc raw = g.virt(kF32, sDims, sStr), x = g.virt(kF32, sDims, sStr);
  g.matmul(q, kT, raw);
  g.pointwise(CUDNN_POINTWISE_MUL, raw, g.scalar(kScale), x);
  if (s.causal) x = causalMask(g, x, sDims, sStr);

  Desc mx = g.virt(kF32, rDims, rStr), shifted = g.virt(kF32, sDims, sStr), e = g.virt(kF32, sDims, sStr);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, x, mx);
  g.pointwise(CUDNN_POINTWISE_SUB, x, mx, shifted);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, nullptr, e);
  Desc sum = g.virt(kF32, rDims, rStr), logSum = g.virt(kF32, rDims, rStr);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, nullptr, logSum);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, logSum, stats);
  Desc p = g.virt(kBF16, sDims, sStr); // P in the I/O type, as bmm2 wants
  g.pointwise(CUDNN_POINTWISE_DIV, e, sum, p);
  g.matmul(p, v, o);
}

// out = a b where a has Hq heads and out Hkv: through a [B, Hq, ., .] product
// reduced over each group of q heads when they differ.
void groupedMatmul(GraphBuilder &g, Desc a, Desc b, Desc out, const Dims &fullDims, bool grouped) {
  if (!grouped) {
    g.matmul(a, b, out);
    return;
  }
  Desc full = g.virt(kBF16, fullDims, packedStrides(fullDims));
  g.matmul(a, b, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

void buildBackward(GraphBuilder &g, const SdpaShape &s) {
  const int64_t B = s.batch, H = s.qHeads, K = s.kvHeads, S = s.seq, D = s.headDim, Dv = s.vHeadDim;
  const Dims sDims{B, H, S, S}, sStr = packedStrides(sDims), rDims{B, H, S, 1}, rStr{H * S, S, 1, 1};
  const Dims tStr{H * S * S, S * S, 1, S}; // [B, H, S_kv, S_q]: a score matrix read transposed
  Desc q = g.tensor(kQ, kBF16, {B, H, S, D}, ioStrides(s, H, D));
  Desc kT = g.tensor(kK, kBF16, {B, K, D, S}, swapLast(ioStrides(s, K, D)));
  Desc vT = g.tensor(kV, kBF16, {B, K, Dv, S}, swapLast(ioStrides(s, K, Dv)));
  Desc o = g.tensor(kO, kBF16, {B, H, S, Dv}, ioStrides(s, H, Dv));
  Desc dO = g.tensor(kDO, kBF16, {B, H, S, Dv}, ioStrides(s, H, Dv));
  Desc stats = g.tensor(kStats, kF32, rDims, rStr);
  Desc dq = g.tensor(kDQ, kBF16, {B, H, S, D}, ioStrides(s, H, D));
  Desc dk = g.tensor(kDK, kBF16, {B, K, S, D}, ioStrides(s, K, D));
  Desc dv = g.tensor(kDV, kBF16, {B, K, S, Dv}, ioStrides(s, K, Dv));
  Desc rowSum = g.tensor(kRowSum, kF32, rDims, rStr);
  Desc dqAccum = g.tensor(kDQAccum, kF32, {B, H, S, D}, packedStrides({B, H, S, D}));
  Desc scale = g.scalar(kScale);

  // rowSum = sum(dO * O) over the head dim (the frontend's strides for the virtual product).
  Desc dOO = g.virt(kF32, {B, H, S, Dv}, {H * S * Dv, S * Dv, H * Dv, 1}), dOOSum = g.virt(kF32, rDims, rStr);
  g.pointwise(CUDNN_POINTWISE_MUL, dO, o, dOO);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOO, dOOSum);
  g.pointwise(CUDNN_POINTWISE_MUL, dOOSum, g.scalar(kOne), rowSum);

  // P = exp(scale Q K^T - stats), masked after the shift as the frontend does.
  Desc raw = g.virt(kF32, sDims, sStr), scaled = g.virt(kF32, sDims, sStr), x = g.virt(kF32, sDims, sStr);
  g.matmul(q, kT, raw);
  g.pointwise(CUDNN_POINTWISE_MUL, raw, scale, scaled);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, stats, x);
  if (s.causal) x = causalMask(g, x, sDims, sStr);
  Desc p = g.virt(kF32, sDims, sStr);
  g.pointwise(CUDNN_POINTWISE_EXP, x, nullptr, p);

  Desc pT = g.virt(kBF16, {B, H, S, S}, tStr);
  g.reshape(p, pT);
  groupedMatmul(g, pT, dO, dv, {B, H, S, Dv}, H != K);

  // dS = scale * P * (dO V^T - rowSum)
  Desc dP = g.virt(kF32, sDims, sStr), t1 = g.virt(kF32, sDims, sStr), t2 = g.virt(kF32, sDims, sStr);
  Desc dS = g.virt(kF32, sDims, sStr);
  g.matmul(dO, vT, dP);
  g.pointwise(CUDNN_POINTWISE_SUB, dP, rowSum, t1);
  g.pointwise(CUDNN_POINTWISE_MUL, t1, p, t2);
  g.pointwise(CUDNN_POINTWISE_MUL, t2, scale, dS);

  Desc dST = g.virt(kBF16, {B, H, S, S}, tStr);
  g.reshape(dS, dST);
  groupedMatmul(g, dST, q, dk, {B, H, S, D}, H != K);

  // dQ = dS K, accumulated in f32 (K read back in its own layout).
  Desc kk = g.virt(kF32, {B, K, S, D}, ioStrides(s, K, D));
  g.reshape(kT, kk);
  g.matmul(dS, kk, dqAccum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dqAccum, nullptr, dq);
}

// --- Plan cache ---

struct CachedPlan {
  std::unique_ptr<GraphBuilder> graph; // owns every descriptor, the plan's included
  Desc plan = nullptr;
  int64_t workspace = 0;
  std::string failure;              // non-empty: cuDNN cannot run this problem
  mutable bool warnedSmall = false; // the "workspace too small" note was printed (under cacheMutex())
};

// A problem's sizes, layout, mask and scale bits: what a plan is built for
// (with its handle, device and direction), and what a stash was left by.
std::array<uint64_t, 9> problemOf(const SdpaShape &s) {
  uint32_t scaleBits = 0;
  std::memcpy(&scaleBits, &s.scale, sizeof scaleBits);
  return {uint64_t(s.batch), uint64_t(s.qHeads), uint64_t(s.kvHeads), uint64_t(s.seq), uint64_t(s.headDim),
          uint64_t(s.vHeadDim), uint64_t(s.bshd), uint64_t(s.causal), scaleBits};
}

using PlanKey = std::tuple<uintptr_t, int, std::array<uint64_t, 9>, bool>; // handle, device, problem, backward

// Never destroyed: test contexts drop their plans from static destructors.
std::mutex &cacheMutex() {
  static auto *m = new std::mutex();
  return *m;
}
std::map<PlanKey, std::unique_ptr<CachedPlan>> &planCache() {
  static auto *cache = new std::map<PlanKey, std::unique_ptr<CachedPlan>>();
  return *cache;
}

std::atomic<uint64_t> forwardCalls{0}, backwardCalls{0}, stashedBackwardCalls{0};
std::mutex &fallbackMutex() {
  static auto *m = new std::mutex();
  return *m;
}
std::string &lastFallback() {
  static auto *s = new std::string();
  return *s;
}

void noteFallback(const std::string &why) {
  std::lock_guard<std::mutex> lock(fallbackMutex());
  lastFallback() = why;
}

std::unique_ptr<CachedPlan> buildPlan(cudnnHandle_t handle, const SdpaShape &s, bool backward) {
  auto p = std::make_unique<CachedPlan>();
  p->graph = std::make_unique<GraphBuilder>(handle);
  if (backward)
    buildBackward(*p->graph, s);
  else
    buildForward(*p->graph, s);
  p->plan = p->graph->plan(&p->workspace);
  if (!p->plan) {
    p->failure = "cuDNN SDPA " + describe(s, backward) + ": " + p->graph->failure();
    p->graph.reset();
    llvm::errs() << "megac: warning: " << p->failure << "; attention runs on the materialized kernels\n";
  }
  return p;
}

// The cached plan of a problem, built on first use. Entries live until
// destroyDnnHandle drops their handle's.
const CachedPlan *planFor(GpuContext &ctx, const SdpaShape &s, bool backward) {
  int device = 0;
  cudaGetDevice(&device);
  const PlanKey key{reinterpret_cast<uintptr_t>(ctx.dnn), device, problemOf(s), backward};
  std::lock_guard<std::mutex> lock(cacheMutex());
  auto &cache = planCache();
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, buildPlan(ctx.dnn, s, backward)).first;
  return it->second.get();
}

// The forward plan and, for the backward, its own; false with the reason
// recorded where either is missing.
bool plansFor(GpuContext &ctx, const SdpaShape &s, bool backward, const CachedPlan **fwd, const CachedPlan **bwd) {
  if (!ctx.dnn) return false;
  if (std::string why = cudnnSdpaShapeProblem(s); !why.empty()) {
    noteFallback("cuDNN SDPA " + describe(s, backward) + ": " + why);
    return false;
  }
  *fwd = planFor(ctx, s, false);
  *bwd = backward ? planFor(ctx, s, true) : nullptr;
  for (const CachedPlan *p : {*fwd, *bwd})
    if (p && !p->plan) {
      noteFallback(p->failure);
      return false;
    }
  return true;
}

int64_t dnnWorkspace(const CachedPlan *fwd, const CachedPlan *bwd) {
  return std::max<int64_t>(fwd->workspace, bwd ? bwd->workspace : 0);
}

// False (with a note, once per problem) where the workspace cannot hold the cuDNN path.
bool fits(const CachedPlan *plan, const SdpaShape &s, bool backward, size_t need, size_t have) {
  if (need <= have) return true;
  std::string why = "cuDNN SDPA " + describe(s, backward) + " needs " + std::to_string(need) +
                    " bytes of workspace, the kernel has " + std::to_string(have);
  noteFallback(why);
  std::lock_guard<std::mutex> lock(cacheMutex());
  if (!plan->warnedSmall) {
    plan->warnedSmall = true;
    llvm::errs() << "megac: note: " << why << "; attention runs on the materialized kernels\n";
  }
  return false;
}

// By-value scalars of the graphs (host memory, read when the plan launches).
struct Scalars {
  float scale, negInf, one = 1.0f;
  explicit Scalars(const SdpaShape &s)
      : scale(s.scale), negInf(cudnnGetVersion() < 91000 ? -FLT_MAX : -INFINITY) {} // as cudnn-frontend picks
};

llvm::Error execute(GpuContext &ctx, const CachedPlan &plan, const std::vector<std::pair<int64_t, void *>> &args,
                    void *workspace) {
  std::vector<int64_t> uids;
  std::vector<void *> ptrs;
  for (auto &[uid, ptr] : args) uids.push_back(uid), ptrs.push_back(ptr);
  MEGAC_CUDNN_TRY(cudnnSetStream(ctx.dnn, ctx.stream));
  struct Owned {
    Desc d = nullptr;
    ~Owned() {
      if (d) cudnnBackendDestroyDescriptor(d);
    }
  } owned;
  MEGAC_CUDNN_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &owned.d));
  Desc pack = owned.d;
  MEGAC_CUDNN_TRY(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                           int64_t(uids.size()), uids.data()));
  MEGAC_CUDNN_TRY(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                           int64_t(ptrs.size()), ptrs.data()));
  MEGAC_CUDNN_TRY(
      cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
  MEGAC_CUDNN_TRY(cudnnBackendFinalize(pack));
  MEGAC_CUDNN_TRY(cudnnBackendExecute(ctx.dnn, plan.plan, pack));
  return llvm::Error::success();
}

std::vector<std::pair<int64_t, void *>> forwardArgs(const SdpaShape &s, const Buffers &b, Scalars &c) {
  std::vector<std::pair<int64_t, void *>> a{{kQ, b.q}, {kK, b.k}, {kV, b.v}, {kO, b.o}, {kStats, b.stats},
                                            {kScale, &c.scale}};
  if (s.causal) a.push_back({kNegInf, &c.negInf});
  return a;
}

std::vector<std::pair<int64_t, void *>> backwardArgs(const SdpaShape &s, const Buffers &b, Scalars &c) {
  std::vector<std::pair<int64_t, void *>> a{
      {kQ, b.q},       {kK, b.k},   {kV, b.v},   {kO, b.o},           {kDO, b.dO},           {kStats, b.stats},
      {kDQ, b.dq},     {kDK, b.dk}, {kDV, b.dv}, {kRowSum, b.rowSum}, {kDQAccum, b.dqAccum}, {kScale, &c.scale},
      {kOne, &c.one}};
  if (s.causal) a.push_back({kNegInf, &c.negInf});
  return a;
}

// Q, K, V to bf16, the forward plan, O back to f32.
llvm::Error enqueueForward(GpuContext &ctx, const SdpaShape &s, const CachedPlan &fwd, const Buffers &b,
                           const float *q, const float *k, const float *v, float *y) {
  const int64_t B = s.batch, H = s.qHeads, K = s.kvHeads, S = s.seq;
  ConvertBatch in;
  in.add(q, b.q, B * H * S * s.headDim);
  in.add(k, b.k, B * K * S * s.headDim);
  in.add(v, b.v, B * K * S * s.vHeadDim);
  if (auto e = convertToBf16(ctx.stream, in)) return e;
  Scalars scalars(s);
  if (auto e = execute(ctx, fwd, forwardArgs(s, b, scalars), b.dnn)) return e;
  ConvertBatch out;
  out.add(b.o, y, B * H * S * s.vHeadDim);
  return convertToF32(ctx.stream, out);
}

// dY (and, without a stashed forward, Q, K, V) to bf16, the forward plan for
// O and the stats unless stashed (the op gets only dY, Q, K and V), the
// backward plan, the gradients back to f32.
llvm::Error enqueueBackward(GpuContext &ctx, const SdpaShape &s, const CachedPlan &fwd, const CachedPlan &bwd,
                            const Buffers &b, bool stashed, const float *dy, const float *q, const float *k,
                            const float *v, float *dq, float *dk, float *dv) {
  const int64_t B = s.batch, H = s.qHeads, K = s.kvHeads, S = s.seq, D = s.headDim, Dv = s.vHeadDim;
  ConvertBatch in;
  if (!stashed) {
    in.add(q, b.q, B * H * S * D);
    in.add(k, b.k, B * K * S * D);
    in.add(v, b.v, B * K * S * Dv);
  }
  in.add(dy, b.dO, B * H * S * Dv);
  if (auto e = convertToBf16(ctx.stream, in)) return e;
  Scalars scalars(s);
  if (!stashed)
    if (auto e = execute(ctx, fwd, forwardArgs(s, b, scalars), b.dnn)) return e;
  // cuDNN >= 9.6 clears the accumulator itself (cudnn-frontend stopped doing
  // it); clearing it here as well costs little and does not depend on that.
  MEGAC_CUDA_TRY(cudaMemsetAsync(b.dqAccum, 0, size_t(B * H * S * D) * sizeof(float), ctx.stream));
  if (auto e = execute(ctx, bwd, backwardArgs(s, b, scalars), b.dnn)) return e;
  ConvertBatch out;
  out.add(b.dq, dq, B * H * S * D);
  out.add(b.dk, dk, B * K * S * D);
  out.add(b.dv, dv, B * K * S * Dv);
  return convertToF32(ctx.stream, out);
}

// Whether the stash (as large as the plan sized it; its address may not be
// set yet) holds this problem's residue.
bool residueFitsStash(const GpuContext &ctx, const SdpaShape &s) {
  Buffers b;
  WorkspaceCarver residue(nullptr);
  carveForwardResidue(residue, s, b);
  return ctx.attentionStashBytes > 0 && residue.used() <= ctx.attentionStashBytes;
}

// The stash's residue where a forward of this run left it for `source`, else false.
bool stashHolds(const GpuContext &ctx, const SdpaShape &s, const SdpaSource *source) {
  const GpuContext::StashOwner &o = ctx.stashOwner;
  return source && ctx.attentionStash && o.run == ctx.programRun && o.q == source->q && o.k == source->k &&
         o.v == source->v && o.problem == problemOf(s);
}

} // namespace

bool cudnnAttentionBuiltIn() { return true; }

std::string cudnnSdpaShapeProblem(const SdpaShape &s) {
  return plan::fusedAttentionShapeProblem(s.batch, s.qHeads, s.kvHeads, s.seq, s.headDim, s.vHeadDim);
}

size_t cudnnSdpaWorkspace(GpuContext &ctx, const SdpaShape &s, bool backward) {
  const CachedPlan *fwd = nullptr, *bwd = nullptr;
  if (!plansFor(ctx, s, backward, &fwd, &bwd)) return 0;
  WorkspaceCarver c(nullptr);
  if (residueFitsStash(ctx, s)) { // the residue goes to the stash (plan::fusedAttentionScratchBytes)
    Buffers b;
    if (backward) carveGradient(c, s, b);
    c.take<char>(dnnWorkspace(fwd, bwd));
  } else {
    carve(c, s, backward, dnnWorkspace(fwd, bwd));
  }
  return c.used();
}

llvm::Expected<bool> cudnnSdpaForward(GpuContext &ctx, const SdpaShape &s, const float *q, const float *k,
                                      const float *v, float *y, void *workspace, size_t workspaceBytes,
                                      const SdpaSource *source) {
  const CachedPlan *fwd = nullptr, *bwd = nullptr;
  if (!plansFor(ctx, s, false, &fwd, &bwd)) return false;
  Buffers b;
  WorkspaceCarver residue(ctx.attentionStash), scratch(workspace);
  carveForwardResidue(residue, s, b);
  const bool stash = ctx.attentionStash && residueFitsStash(ctx, s);
  if (stash)
    b.dnn = scratch.take<char>(dnnWorkspace(fwd, bwd));
  else
    b = carve(scratch, s, false, dnnWorkspace(fwd, bwd));
  if (!fits(fwd, s, false, scratch.used(), workspaceBytes)) return false;
  if (stash) ctx.stashOwner = {}; // overwritten from here on
  if (llvm::Error e = enqueueForward(ctx, s, *fwd, b, q, k, v, y)) return llvm::Expected<bool>(std::move(e));
  if (stash && source) ctx.stashOwner = {ctx.programRun, source->q, source->k, source->v, problemOf(s)};
  ++forwardCalls;
  return true;
}

llvm::Expected<bool> cudnnSdpaBackward(GpuContext &ctx, const SdpaShape &s, const float *dy, const float *q,
                                       const float *k, const float *v, float *dq, float *dk, float *dv,
                                       void *workspace, size_t workspaceBytes, const SdpaSource *source,
                                       bool operandsStashed) {
  const CachedPlan *fwd = nullptr, *bwd = nullptr;
  if (!plansFor(ctx, s, true, &fwd, &bwd)) return false;
  const bool stashed = stashHolds(ctx, s, source);
  if (operandsStashed && !stashed)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the plan ended Q, K and V at the forward, whose residue the attention stash "
                                   "should hold, but it holds another's (or none)");
  // Without this gradient's forward in the stash, its own forward writes
  // there (what the scratch was sized for), over another's residue.
  const bool inStash = stashed || (ctx.attentionStash && residueFitsStash(ctx, s));
  Buffers b;
  WorkspaceCarver scratch(workspace);
  if (inStash) {
    WorkspaceCarver residue(ctx.attentionStash);
    carveForwardResidue(residue, s, b);
    carveGradient(scratch, s, b);
    b.dnn = scratch.take<char>(dnnWorkspace(fwd, bwd));
  } else {
    b = carve(scratch, s, true, dnnWorkspace(fwd, bwd));
  }
  if (!fits(bwd, s, true, scratch.used(), workspaceBytes)) return false;
  if (inStash && !stashed) ctx.stashOwner = {}; // overwritten from here on
  if (llvm::Error e = enqueueBackward(ctx, s, *fwd, *bwd, b, stashed, dy, q, k, v, dq, dk, dv))
    return llvm::Expected<bool>(std::move(e));
  ++backwardCalls;
  if (stashed) ++stashedBackwardCalls;
  return true;
}

CudnnAttentionStats cudnnAttentionStats() {
  CudnnAttentionStats st;
  st.forwardCalls = forwardCalls.load();
  st.backwardCalls = backwardCalls.load();
  st.stashedBackwardCalls = stashedBackwardCalls.load();
  std::lock_guard<std::mutex> lock(fallbackMutex());
  st.lastFallback = lastFallback();
  return st;
}

bool createDnnHandle(GpuContext &ctx, std::string *why) {
  const size_t version = cudnnGetVersion();
  if (version < 90000) {
    *why = "cuDNN " + std::to_string(version) + " is older than 9.0";
    return false;
  }
  cudnnStatus_t s = cudnnCreate(&ctx.dnn);
  if (s != CUDNN_STATUS_SUCCESS) {
    ctx.dnn = nullptr;
    *why = "cudnnCreate: " + dnnStatusText(s);
    return false;
  }
  return true;
}

void destroyDnnHandle(GpuContext &ctx) {
  if (!ctx.dnn) return;
  {
    std::lock_guard<std::mutex> lock(cacheMutex());
    auto &cache = planCache();
    for (auto it = cache.begin(); it != cache.end();)
      it = std::get<0>(it->first) == reinterpret_cast<uintptr_t>(ctx.dnn) ? cache.erase(it) : std::next(it);
  }
  cudnnDestroy(ctx.dnn);
  ctx.dnn = nullptr;
}

#else // !MEGAC_HAS_CUDNN: the dispatch never picks this path

bool cudnnAttentionBuiltIn() { return false; }
std::string cudnnSdpaShapeProblem(const SdpaShape &) { return "megac was built without cuDNN"; }
size_t cudnnSdpaWorkspace(GpuContext &, const SdpaShape &, bool) { return 0; }
llvm::Expected<bool> cudnnSdpaForward(GpuContext &, const SdpaShape &, const float *, const float *, const float *,
                                      float *, void *, size_t, const SdpaSource *) {
  return false;
}
llvm::Expected<bool> cudnnSdpaBackward(GpuContext &, const SdpaShape &, const float *, const float *, const float *,
                                       const float *, float *, float *, float *, void *, size_t, const SdpaSource *,
                                       bool) {
  return false;
}
CudnnAttentionStats cudnnAttentionStats() { return {}; }
bool createDnnHandle(GpuContext &ctx, std::string *) {
  ctx.dnn = nullptr;
  return true;
}
void destroyDnnHandle(GpuContext &ctx) { ctx.dnn = nullptr; }

#endif

} // namespace megac::cuda
