// ltMatmul: row-major strided-batched fp32 GEMMs on cuBLASLt (see LtMatmul.h).
// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a
// row-major matrix read as column-major is its transpose: so cuBLASLt gets our
// B as its A and our A as its B, with the same transpose flags, and our C as a
// column-major n x m matrix.
#include "runtime/cuda/LtMatmul.h"

#include "runtime/cuda/CudaCheck.h"
#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/StreamLayout.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <type_traits>
#include <unordered_map>

namespace megac::cuda {

cublasComputeType_t ltComputeType(ComputeMode mode) {
  switch (mode) {
  case ComputeMode::BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
  case ComputeMode::TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
  case ComputeMode::FP32: return CUBLAS_COMPUTE_32F;
  }
  return CUBLAS_COMPUTE_32F;
}

namespace {

// cuBLASLt takes the batch count as int32; stay well inside what its kernels
// index on a grid dimension.
constexpr int64_t kMaxBatchPerCall = 65535;
// Distinct problems are few in a plan; a runaway cache is cleared.
constexpr size_t kMaxCachedPlans = 4096;

// C_i = (beta == 0 ? 0 : beta * C_i) + bias (broadcast over rows).
__global__ void prepareCKernel(float *c, int64_t ldc, int64_t strideC, int64_t m, int64_t n, int64_t batch,
                               float beta, const float *bias) {
  const int64_t total = batch * m * n;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t col = e % n, row = (e / n) % m, i = e / (m * n);
    float *p = c + i * strideC + row * ldc + col;
    float v = beta == 0.0f ? 0.0f : beta * *p;
    if (bias) v += bias[col];
    *p = v;
  }
}

llvm::Error prepareC(GpuContext &ctx, float *c, int64_t ldc, int64_t strideC, int64_t m, int64_t n, int64_t batch,
                     float beta, const float *bias) {
  const int64_t total = batch * m * n;
  if (total == 0) return llvm::Error::success();
  prepareCKernel<<<gridFor(total), 256, 0, ctx.stream>>>(c, ldc, strideC, m, n, batch, beta, bias);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

// The largest power of two (at most 256) dividing every matrix's address.
uint32_t alignmentOf(const void *p, int64_t strideElems, int64_t batch, size_t elemBytes = sizeof(float)) {
  uint64_t v = uint64_t(reinterpret_cast<uintptr_t>(p)) | 256u;
  if (batch > 1) v |= uint64_t(strideElems) * elemBytes;
  return uint32_t(v & (~v + 1));
}

struct PlanKey {
  cublasLtHandle_t handle;
  int mode;
  bool transA, transB, bias;
  int64_t m, n, k, batch, lda, ldb, ldc, strideA, strideB, strideC;
  uint32_t alignA, alignB, alignC, alignBias;
  size_t workspace;
  bool bf16Operands; // A and B packed to bf16 (BF16 mode with scratch), else fp32
  bool roundOnce;    // LtGemm::roundOnce: no in-place split-K reduction

  auto tie() const {
    return std::tie(handle, mode, transA, transB, bias, m, n, k, batch, lda, ldb, ldc, strideA, strideB, strideC,
                    alignA, alignB, alignC, alignBias, workspace, bf16Operands, roundOnce);
  }
  bool operator==(const PlanKey &o) const { return tie() == o.tie(); }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey &k) const {
    size_t h = std::hash<const void *>()(k.handle);
    auto mix = [&h](uint64_t v) { h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    mix(uint64_t(k.mode) | uint64_t(k.transA) << 8 | uint64_t(k.transB) << 9 | uint64_t(k.bias) << 10 |
        uint64_t(k.bf16Operands) << 11 | uint64_t(k.roundOnce) << 12);
    for (int64_t v : {k.m, k.n, k.k, k.batch, k.lda, k.ldb, k.ldc, k.strideA, k.strideB, k.strideC}) mix(uint64_t(v));
    mix(uint64_t(k.alignA) | uint64_t(k.alignB) << 16 | uint64_t(k.alignC) << 32 | uint64_t(k.alignBias) << 48);
    mix(k.workspace);
    return h;
  }
};

// Descriptors and the chosen algorithm of one problem.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layoutA = nullptr, layoutB = nullptr, layoutC = nullptr; // cuBLASLt's A, B, C/D
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool biasEpilogue = false; // a bias was asked for and the epilogue adds it
  bool usable = true;        // false: cuBLASLt has no algorithm (bf16 operands then fall back to fp32 ones)

  Plan() = default;
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;
  ~Plan() {
    if (layoutC) cublasLtMatrixLayoutDestroy(layoutC);
    if (layoutB) cublasLtMatrixLayoutDestroy(layoutB);
    if (layoutA) cublasLtMatrixLayoutDestroy(layoutA);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// A column-major layout of `rows` x `cols` with leading dimension ld, batched.
llvm::Error makeLayout(cublasLtMatrixLayout_t *layout, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                       int64_t stride, cudaDataType_t type = CUDA_R_32F) {
  MEGAC_CUBLAS_TRY(cublasLtMatrixLayoutCreate(layout, type, uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    int32_t count = int32_t(batch);
    MEGAC_CUBLAS_TRY(
        cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    MEGAC_CUBLAS_TRY(
        cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return llvm::Error::success();
}

llvm::Error setEpilogue(Plan &p, bool bias, const float *biasPtr) {
  cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  MEGAC_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (bias) {
    // The heuristic reads the pointer's value for its alignment.
    const void *ptr = biasPtr;
    MEGAC_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof(ptr)));
  }
  return llvm::Error::success();
}

// The best algorithm for the plan's descriptors; false when none applies.
llvm::Expected<bool> chooseAlgo(const PlanKey &key, Plan &p) {
  cublasLtMatmulPreference_t pref = nullptr;
  MEGAC_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, cublasStatus_t (*)(cublasLtMatmulPreference_t)>
      prefOwner(pref, cublasLtMatmulPreferenceDestroy);
  uint64_t ws = key.workspace;
  MEGAC_CUBLAS_TRY(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // cuBLASLt's A is our B and its B our A.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.alignB},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.alignA},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.alignC},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.alignC}};
  for (auto &[attr, value] : aligns)
    MEGAC_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
  if (key.roundOnce) {
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~uint32_t(CUBLASLT_REDUCTION_SCHEME_INPLACE);
    MEGAC_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                          sizeof(schemes)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(key.handle, p.desc, p.layoutA, p.layoutB, p.layoutC, p.layoutC,
                                                    pref, 1, &result, &found);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  if (s != CUBLAS_STATUS_SUCCESS) return cublasFailure(s, "cublasLtMatmulAlgoGetHeuristic");
  p.algo = result.algo;
  p.workspace = result.workspaceSize;
  return true;
}

llvm::Error buildPlan(const PlanKey &key, ComputeMode mode, const float *biasPtr, Plan &p) {
  // bf16 operands: plain fp32 accumulation over bf16 inputs, fp32 C.
  const cudaDataType_t in = key.bf16Operands ? CUDA_R_16BF : CUDA_R_32F;
  MEGAC_CUBLAS_TRY(
      cublasLtMatmulDescCreate(&p.desc, key.bf16Operands ? CUBLAS_COMPUTE_32F : ltComputeType(mode), CUDA_R_32F));
  cublasOperation_t opA = key.transB ? CUBLAS_OP_T : CUBLAS_OP_N; // cuBLASLt's A = our B
  cublasOperation_t opB = key.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  MEGAC_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
  MEGAC_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
  // Our row-major B (k x n, or n x k stored when transposed) read column-major.
  if (auto e = makeLayout(&p.layoutA, key.transB ? key.k : key.n, key.transB ? key.n : key.k, key.ldb, key.batch,
                          key.strideB, in))
    return e;
  if (auto e = makeLayout(&p.layoutB, key.transA ? key.m : key.k, key.transA ? key.k : key.m, key.lda, key.batch,
                          key.strideA, in))
    return e;
  if (auto e = makeLayout(&p.layoutC, key.n, key.m, key.ldc, key.batch, key.strideC)) return e;
  if (key.bias) {
    if (auto e = setEpilogue(p, true, biasPtr)) return e;
    auto ok = chooseAlgo(key, p);
    if (!ok) return ok.takeError();
    if (*ok) {
      p.biasEpilogue = true;
      return llvm::Error::success();
    }
    // No algorithm with the bias epilogue: ltMatmul adds the bias itself.
    if (auto e = setEpilogue(p, false, nullptr)) return e;
  }
  auto ok = chooseAlgo(key, p);
  if (!ok) return ok.takeError();
  if (!*ok && key.bf16Operands) {
    p.usable = false;
    return llvm::Error::success();
  }
  if (!*ok)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cuBLASLt has no algorithm for a " + std::to_string(key.m) + "x" +
                                       std::to_string(key.n) + "x" + std::to_string(key.k) + " product (batch " +
                                       std::to_string(key.batch) + ", " + computeModeName(mode) + ")");
  return llvm::Error::success();
}

std::mutex cacheMutex;
std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> &planCache() {
  static auto *cache = new std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash>();
  return *cache;
}

llvm::Error checkShape(const LtGemm &g) {
  auto bad = [](const std::string &what) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "ltMatmul: " + what);
  };
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0) return bad("negative size");
  if (g.strideA < 0 || g.strideB < 0 || g.strideC < 0) return bad("negative batch stride");
  if (g.ldc < g.n) return bad("ldc is smaller than n");
  if (g.lda < (g.transA ? g.m : g.k) || g.ldb < (g.transB ? g.k : g.n)) return bad("lda/ldb smaller than a row");
  if (g.batch > 1 && g.strideC < g.m * g.ldc - (g.ldc - g.n) && g.m * g.n > 0)
    return bad("the C matrices of the batch overlap");
  return llvm::Error::success();
}

// One call of at most kMaxBatchPerCall products. `a` and `b` are the
// operands as g describes them (fp32, or packed bf16 when bf16Operands); false
// when cuBLASLt has no algorithm for bf16 operands of this shape.
llvm::Expected<bool> runChunk(GpuContext &ctx, const LtGemm &g, const void *a, const void *b, bool bf16Operands) {
  const bool batched = g.batch > 1;
  const size_t opBytes = bf16Operands ? 2 : 4;
  PlanKey key{};
  key.handle = ctx.lt;
  key.mode = int(ctx.mode);
  key.transA = g.transA;
  key.transB = g.transB;
  key.bias = g.bias != nullptr;
  key.m = g.m, key.n = g.n, key.k = g.k, key.batch = g.batch;
  key.lda = g.lda, key.ldb = g.ldb, key.ldc = g.ldc;
  key.strideA = batched ? g.strideA : 0;
  key.strideB = batched ? g.strideB : 0;
  key.strideC = batched ? g.strideC : 0;
  key.alignA = alignmentOf(a, g.strideA, g.batch, opBytes);
  key.alignB = alignmentOf(b, g.strideB, g.batch, opBytes);
  key.alignC = alignmentOf(g.c, g.strideC, g.batch);
  key.alignBias = g.bias ? alignmentOf(g.bias, 0, 1) : 0;
  key.workspace = ctx.gemmWorkspace ? ctx.gemmWorkspaceBytes : 0;
  key.bf16Operands = bf16Operands;
  key.roundOnce = g.roundOnce;

  std::lock_guard<std::mutex> lock(cacheMutex);
  auto &cache = planCache();
  auto it = cache.find(key);
  if (it == cache.end()) {
    auto plan = std::make_unique<Plan>();
    if (auto e = buildPlan(key, ctx.mode, g.bias, *plan)) return std::move(e); // nvcc needs the move
    if (cache.size() >= kMaxCachedPlans) cache.clear();
    it = cache.emplace(key, std::move(plan)).first;
  }
  Plan &p = *it->second;
  if (!p.usable) return false;
  float beta = g.beta;
  if (g.bias) {
    if (p.biasEpilogue) {
      const void *ptr = g.bias;
      MEGAC_CUBLAS_TRY(
          cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof(ptr)));
    } else {
      if (auto e = prepareC(ctx, g.c, g.ldc, key.strideC, g.m, g.n, g.batch, g.beta, g.bias)) return std::move(e);
      beta = 1.0f;
    }
  }
  const float *cIn = g.cIn && beta != 0.0f ? g.cIn : g.c; // ltMatmul copied it to c where a bias is added
  MEGAC_CUBLAS_TRY(cublasLtMatmul(ctx.lt, p.desc, &g.alpha, b, p.layoutA, a, p.layoutB, &beta, cIn, p.layoutC, g.c,
                                  p.layoutC, &p.algo, p.workspace ? ctx.gemmWorkspace : nullptr, p.workspace,
                                  ctx.stream));
  return true;
}

// A stored operand: `batch` matrices of rows x cols, row stride ld, batch
// stride `stride` (0: one matrix for all).
struct Stored {
  int64_t rows, cols, ld, stride, batch;
  int64_t packedElems() const { return (stride == 0 ? 1 : batch) * rows * cols; }
  // One matrix stored without padding (a caller's packed B, a weight slot's copy).
  bool onePacked() const { return ld == cols && (stride == 0 || batch == 1); }
};

Stored storedA(const LtGemm &g) {
  return {g.transA ? g.k : g.m, g.transA ? g.m : g.k, g.lda, g.strideA, g.batch};
}
Stored storedB(const LtGemm &g) {
  return {g.transB ? g.n : g.k, g.transB ? g.k : g.n, g.ldb, g.strideB, g.batch};
}

int64_t align128(int64_t elems) { return (elems + 127) / 128 * 128; }

// dst[i][r][c] = bf16(src[i * stride + r * ld + c]), packed.
__global__ void packBf16Kernel(__nv_bfloat16 *dst, const float *src, int64_t rows, int64_t cols, int64_t ld,
                               int64_t stride, int64_t total) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % cols, r = (e / cols) % rows, i = e / (rows * cols);
    dst[e] = __float2bfloat16(src[i * stride + r * ld + c]);
  }
}

// The same four elements at a time (cols, ld, stride multiples of 4, src 16-byte aligned).
__global__ void packBf16x4Kernel(__nv_bfloat162 *dst, const float4 *src, int64_t rows, int64_t cols4, int64_t ld4,
                                 int64_t stride4, int64_t total4) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total4; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % cols4, r = (e / cols4) % rows, i = e / (rows * cols4);
    const float4 v = src[i * stride4 + r * ld4 + c];
    dst[2 * e] = __floats2bfloat162_rn(v.x, v.y);
    dst[2 * e + 1] = __floats2bfloat162_rn(v.z, v.w);
  }
}

// The same for a matrix stored without padding: no index arithmetic (the
// 64-bit divisions above cost the kernels most of their bandwidth).
__global__ void packBf16LinearKernel(uint2 *dst, const float4 *src, int64_t total4) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total4; e += int64_t(gridDim.x) * blockDim.x) {
    const float4 v = src[e];
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    dst[e] = make_uint2(*reinterpret_cast<const unsigned *>(&lo), *reinterpret_cast<const unsigned *>(&hi));
  }
}

// dst[i] = float(src[i]), four at a time where both are aligned for it.
__global__ void unpackBf16Kernel(float *dst, const __nv_bfloat16 *src, int64_t total) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x)
    dst[e] = __bfloat162float(src[e]);
}
__global__ void unpackBf16x4Kernel(float4 *dst, const uint2 *src, int64_t total4) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total4; e += int64_t(gridDim.x) * blockDim.x) {
    const uint2 v = src[e];
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&v.x)),
                 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&v.y));
    dst[e] = make_float4(lo.x, lo.y, hi.x, hi.y);
  }
}

// The bf16 mode packs every product's operands to bf16; where it cannot, the
// product runs on the fp32 operands under FAST_16BF, where rounding to bf16
// is cuBLASLt's choice, at about half the rate: said once per shape.
void noteFp32Operands(const LtGemm &g, const char *why) {
  static std::mutex mutex;
  static std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> noted;
  std::lock_guard<std::mutex> lock(mutex);
  if (noted.insert({g.m, g.n, g.k, g.batch}).second)
    llvm::errs() << "megac: note: in the bf16 mode a " << g.m << "x" << g.n << "x" << g.k << " product (batch "
                 << g.batch << ") runs on its fp32 operands (cuBLASLt's FAST_16BF, about half the rate): " << why
                 << "\n";
}

llvm::Error packBf16(cudaStream_t stream, __nv_bfloat16 *dst, const float *src, const Stored &m) {
  const int64_t total = m.packedElems();
  if (total == 0) return llvm::Error::success();
  const bool contiguous = m.ld == m.cols && (m.stride == m.rows * m.cols || m.stride == 0 || m.batch == 1);
  if (contiguous && total % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(dst) % 8 == 0) {
    packBf16LinearKernel<<<gridFor(total / 4), 256, 0, stream>>>(reinterpret_cast<uint2 *>(dst),
                                                                     reinterpret_cast<const float4 *>(src), total / 4);
  } else if (m.cols % 4 == 0 && m.ld % 4 == 0 && m.stride % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    packBf16x4Kernel<<<gridFor(total / 4), 256, 0, stream>>>(reinterpret_cast<__nv_bfloat162 *>(dst),
                                                                 reinterpret_cast<const float4 *>(src), m.rows,
                                                                 m.cols / 4, m.ld / 4, m.stride / 4, total / 4);
  } else {
    packBf16Kernel<<<gridFor(total), 256, 0, stream>>>(dst, src, m.rows, m.cols, m.ld, m.stride, total);
  }
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

// Bytes from a stored operand's first element past its last.
int64_t spanBytes(const Stored &m, int64_t elemBytes) {
  if (m.packedElems() == 0) return 0;
  return ((m.stride == 0 ? 0 : (m.batch - 1) * m.stride) + (m.rows - 1) * m.ld + m.cols) * elemBytes;
}

bool overlaps(const void *a, int64_t aBytes, const void *b, int64_t bBytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return aBytes > 0 && bBytes > 0 && x < y + uintptr_t(bBytes) && y < x + uintptr_t(aBytes);
}

std::atomic<uint64_t> cacheStores{0}, cacheFinds{0};

// The pack cache's copy of this operand, stored by an earlier product of the run.
const void *findCachedPack(const GpuContext &ctx, const float *src, const Stored &m) {
  for (const GpuContext::PackCache::Entry &e : ctx.packCache.entries)
    if (e.src == src && e.rows == m.rows && e.cols == m.cols && e.ld == m.ld && e.stride == m.stride &&
        e.batch == m.batch) {
      ++cacheFinds;
      return e.copy;
    }
  return nullptr;
}

// Room in the pack cache for this operand's copy, taken (the caller packs
// it there), or nullptr where there is none.
__nv_bfloat16 *takeCachedPack(GpuContext &ctx, const float *src, const Stored &m) {
  GpuContext::PackCache &c = ctx.packCache;
  const size_t bytes = size_t(plan::alignUp(2 * m.packedElems()));
  if (!c.base || bytes == 0 || bytes > c.bytes - std::min(c.top, c.bytes)) return nullptr;
  auto *copy = reinterpret_cast<__nv_bfloat16 *>(c.base + c.top);
  c.top += bytes;
  c.entries.push_back({src, m.rows, m.cols, m.ld, m.stride, m.batch, size_t(spanBytes(m, 4)), copy});
  return copy;
}

bool reusable(const GpuContext &ctx, const float *src, const Stored &m, const void *dst) {
  const GpuContext::PackedA &p = ctx.packedA;
  return ctx.packReuse && p.epoch == ctx.packEpoch && p.src == src && p.dst == dst && p.rows == m.rows &&
         p.cols == m.cols && p.ld == m.ld && p.stride == m.stride && p.batch == m.batch;
}

} // namespace

llvm::Error ltMatmul(GpuContext &ctx, const LtGemm &in) {
  LtGemm g = in;
  if (g.lda == 0) g.lda = g.transA ? g.m : g.k;
  if (g.ldb == 0) g.ldb = g.transB ? g.k : g.n;
  if (g.ldc == 0) g.ldc = g.n;
  // cuBLASLt wants leading dimensions of at least 1 even for degenerate shapes.
  g.lda = std::max<int64_t>(g.lda, 1);
  g.ldb = std::max<int64_t>(g.ldb, 1);
  g.ldc = std::max<int64_t>(g.ldc, 1);
  if (auto e = checkShape(g)) return e;
  if (g.m == 0 || g.n == 0 || g.batch == 0) return llvm::Error::success();
  if (g.cIn && g.cIn != g.c && g.beta != 0.0f && (g.bias || g.k == 0 || g.batch != 1)) {
    // Those paths update c in place: start from cIn there.
    if (g.batch != 1) return llvm::createStringError(llvm::inconvertibleErrorCode(), "ltMatmul: cIn with batch != 1");
    MEGAC_CUDA_TRY(cudaMemcpy2DAsync(g.c, size_t(g.ldc) * 4, g.cIn, size_t(g.ldc) * 4, size_t(g.n) * 4, size_t(g.m),
                                     cudaMemcpyDeviceToDevice, ctx.stream));
    g.cIn = nullptr;
  }
  if (g.k == 0) return prepareC(ctx, g.c, g.ldc, g.strideC, g.m, g.n, g.batch, g.beta, g.bias);
  // BF16 mode: both operands packed to bf16 in the caller's scratch, then a
  // native bf16 product (cuBLASLt's fp32-operand FAST_16BF path runs at
  // about half the tensor-core rate).
  const void *a = g.a, *b = g.b;
  LtGemm op = g;
  bool bf16 = false;
  const Stored sa = storedA(g), sb = storedB(g);
  // A caller's packed B: one matrix stored without padding.
  const bool bPacked = g.bPackedBf16 && sb.onePacked();
  // Operands in a weight slot: its bf16 copy (one matrix stored without padding).
  auto copyOf = [&](const float *p, const Stored &m) -> const void * {
    if (ctx.mode != ComputeMode::BF16 || !m.onePacked()) return nullptr;
    return weightCopyOf(ctx, p, m.rows * m.cols);
  };
  const void *aCopy = copyOf(g.a, sa), *bCopy = bPacked ? g.bPackedBf16 : copyOf(g.b, sb);
  // The pack cache (runtime/plan/PackCache.h): a copy an earlier product of
  // the run stored, else room to store this one's (packed below, or given
  // back where the product does not run on packed operands).
  const bool packs = ctx.mode == ComputeMode::BF16 && g.scratch;
  const size_t cacheTop = ctx.packCache.top, cacheEntries = ctx.packCache.entries.size();
  __nv_bfloat16 *aStore = nullptr, *bStore = nullptr;
  if (packs && !aCopy && g.cacheA) aCopy = findCachedPack(ctx, g.a, sa);
  if (packs && !aCopy && g.cacheA == kPackStore) aCopy = aStore = takeCachedPack(ctx, g.a, sa);
  if (packs && !bCopy && g.cacheB) bCopy = findCachedPack(ctx, g.b, sb);
  if (packs && !bCopy && g.cacheB == kPackStore) bCopy = bStore = takeCachedPack(ctx, g.b, sb);
  const int64_t aPackElems = aCopy ? 0 : sa.packedElems(), bPackElems = bCopy ? 0 : sb.packedElems();
  if (packs && size_t(plan::bf16PackBytes(aPackElems, bPackElems)) <= g.scratchBytes) {
    auto *scratch = static_cast<__nv_bfloat16 *>(g.scratch);
    auto *pa = aCopy ? static_cast<__nv_bfloat16 *>(const_cast<void *>(aCopy)) : scratch;
    auto *pb = bCopy ? static_cast<__nv_bfloat16 *>(const_cast<void *>(bCopy)) : scratch + align128(aPackElems);
    if (aStore)
      if (auto e = packBf16(ctx.stream, aStore, g.a, sa)) return e;
    if (bStore)
      if (auto e = packBf16(ctx.stream, bStore, g.b, sb)) return e;
    cacheStores += int(aStore != nullptr) + int(bStore != nullptr);
    if (aCopy) {
      if (!bCopy) ctx.packedA = {}; // B is packed over the scratch's last packed A
    } else if (reusable(ctx, g.a, sa, pa)) {
      ++ctx.packsReused;
    } else {
      if (auto e = packBf16(ctx.stream, pa, g.a, sa)) return e;
      ctx.packedA = {g.a, pa, sa.rows, sa.cols, sa.ld, sa.stride, sa.batch, ctx.packEpoch};
    }
    if (!bCopy)
      if (auto e = packBf16(ctx.stream, pb, g.b, sb)) return e;
    op.lda = sa.cols, op.strideA = sa.stride == 0 ? 0 : sa.rows * sa.cols;
    op.ldb = sb.cols, op.strideB = sb.stride == 0 ? 0 : sb.rows * sb.cols;
    a = pa, b = pb;
    bf16 = true;
  } else if (ctx.mode == ComputeMode::BF16) {
    ctx.packCache.top = cacheTop; // nothing was stored
    ctx.packCache.entries.resize(cacheEntries);
    noteFp32Operands(g, g.scratch ? "its scratch cannot hold their bf16 copies" : "it was given no scratch for them");
  }
  // This product's output may cover the packed copy's source (a value that
  // took the bytes of one no longer live): that copy is stale from here.
  const Stored sc{g.m, g.n, g.ldc, g.strideC, g.batch};
  if (overlaps(ctx.packedA.src, spanBytes(Stored{ctx.packedA.rows, ctx.packedA.cols, ctx.packedA.ld,
                                                 ctx.packedA.stride, ctx.packedA.batch}, 4),
               g.c, spanBytes(sc, 4)))
    ctx.packedA = {};
  ctx.packCache.dropOverlapping(g.c, size_t(spanBytes(sc, 4)));
  const size_t opBytes = bf16 ? 2 : 4;
  for (int64_t first = 0; first < g.batch; first += kMaxBatchPerCall) {
    LtGemm chunk = op;
    chunk.batch = std::min(kMaxBatchPerCall, g.batch - first);
    chunk.c = g.c + first * g.strideC;
    const void *ca = static_cast<const uint8_t *>(a) + size_t(first * op.strideA) * opBytes;
    const void *cb = static_cast<const uint8_t *>(b) + size_t(first * op.strideB) * opBytes;
    auto ran = runChunk(ctx, chunk, ca, cb, bf16);
    if (!ran) return ran.takeError();
    if (*ran) continue;
    // No bf16 algorithm for this shape: the fp32 operands as given.
    noteFp32Operands(g, "cuBLASLt has no bf16 algorithm for it");
    LtGemm plain = g;
    plain.batch = chunk.batch;
    plain.c = chunk.c;
    auto again = runChunk(ctx, plain, g.a + first * g.strideA, g.b + first * g.strideB, false);
    if (!again) return again.takeError();
  }
  return llvm::Error::success();
}

static std::atomic<uint64_t> copyReads{0};

uint64_t weightCopyReads() { return copyReads.load(); }
uint64_t packCacheStores() { return cacheStores.load(); }
uint64_t packCacheFinds() { return cacheFinds.load(); }

void GpuContext::PackCache::dropOverlapping(const void *p, size_t n) {
  llvm::erase_if(entries, [&](const Entry &e) { return overlaps(e.src, int64_t(e.srcBytes), p, int64_t(n)); });
}

const void *weightCopyOf(const GpuContext &ctx, const float *p, int64_t elems) {
  if (ctx.mode != ComputeMode::BF16 || !p || elems <= 0) return nullptr;
  for (const GpuContext::WeightCopy &c : ctx.weightCopies)
    if (c.src && p >= c.src && elems <= c.elems && p - c.src <= c.elems - elems) {
      ++copyReads;
      return static_cast<const __nv_bfloat16 *>(c.copy) + (p - c.src);
    }
  return nullptr;
}

llvm::Error ltPackBf16(GpuContext &ctx, void *dst, const float *src, int64_t elems) {
  return packBf16On(ctx.stream, dst, src, elems);
}

llvm::Error packBf16On(cudaStream_t stream, void *dst, const float *src, int64_t elems) {
  return packBf16(stream, static_cast<__nv_bfloat16 *>(dst), src, Stored{1, elems, elems, 0, 1});
}

llvm::Error unpackBf16On(cudaStream_t stream, float *dst, const void *src, int64_t elems) {
  if (elems <= 0) return llvm::Error::success();
  if (elems % 4 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 8 == 0)
    unpackBf16x4Kernel<<<gridFor(elems / 4), 256, 0, stream>>>(reinterpret_cast<float4 *>(dst),
                                                                 static_cast<const uint2 *>(src), elems / 4);
  else
    unpackBf16Kernel<<<gridFor(elems), 256, 0, stream>>>(dst, static_cast<const __nv_bfloat16 *>(src), elems);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

} // namespace megac::cuda
