// megac_profile: measures what megac's cost model needs on this machine and
// prints it as a machine profile (key = value lines) plus a table:
// host<->device bandwidth (pinned, each way and both at once), pageable
// H2D, device memory bandwidth, GEMM throughput per compute type (cuBLASLt,
// random operands), host memory bandwidth,
// CPU AdamW throughput (megac's own kernel; alone, and beside both-way copies,
// which share host memory with it), and GPU memory.
#include "runtime/cpu/Kernel.h"
#include "runtime/cuda/CudnnAttention.h"
#include "runtime/plan/FusedAttention.h"
#include "runtime/cuda/GpuKernel.h"
#include "runtime/train/AdamW.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#define CHECK_CUDA(x)                                                                                                  \
  do {                                                                                                                 \
    cudaError_t e_ = (x);                                                                                              \
    if (e_ != cudaSuccess) {                                                                                           \
      std::fprintf(stderr, "megac_profile: %s: %s\n", #x, cudaGetErrorString(e_));                                   \
      std::exit(1);                                                                                                    \
    }                                                                                                                  \
  } while (0)
#define CHECK_LT(x)                                                                                                    \
  do {                                                                                                                 \
    cublasStatus_t s_ = (x);                                                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                                 \
      std::fprintf(stderr, "megac_profile: %s: cuBLAS status %d\n", #x, int(s_));                                     \
      std::exit(1);                                                                                                    \
    }                                                                                                                  \
  } while (0)

static double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median GB/s of `reps` copies of `bytes`.
static double copyBandwidth(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s, int reps) {
  std::vector<double> r;
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < reps + 1; ++i) {
    CHECK_CUDA(cudaEventRecord(a, s));
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, s));
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    if (i) r.push_back(double(bytes) / (ms * 1e-3) / 1e9);
  }
  std::sort(r.begin(), r.end());
  return r[r.size() / 2];
}

// Queues `reps` copies of `bytes` each way, H2D on s1 and D2H on s2.
static void issueBothWays(cudaStream_t s1, cudaStream_t s2, void *dDst, const void *hSrc, void *hDst, const void *dSrc,
                          size_t bytes, int reps) {
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaMemcpyAsync(dDst, hSrc, bytes, cudaMemcpyHostToDevice, s1));
    CHECK_CUDA(cudaMemcpyAsync(hDst, dSrc, bytes, cudaMemcpyDeviceToHost, s2));
  }
}

static double bothWays(void *dDst, const void *hSrc, void *hDst, const void *dSrc, size_t bytes, int reps) {
  cudaStream_t s1, s2;
  CHECK_CUDA(cudaStreamCreate(&s1));
  CHECK_CUDA(cudaStreamCreate(&s2));
  CHECK_CUDA(cudaDeviceSynchronize());
  double t0 = seconds();
  issueBothWays(s1, s2, dDst, hSrc, hDst, dSrc, bytes, reps);
  CHECK_CUDA(cudaDeviceSynchronize());
  double t = seconds() - t0;
  return 2.0 * double(bytes) * reps / t / 1e9;
}

// Both-way pinned copies to and from every GPU at once (`--gpus N` plans:
// N GPUs pull weights and push gradients through the same host memory), in
// GB/s summed over the GPUs: each GPU its own pinned buffers and streams.
struct GpuCopySide {
  void *h1, *h2, *d1, *d2;
  cudaStream_t s1, s2;
};
static void syncEveryGpu(int gpus) {
  for (int g = 0; g < gpus; ++g) {
    CHECK_CUDA(cudaSetDevice(g));
    CHECK_CUDA(cudaDeviceSynchronize());
  }
}
static double allGpusBothWays(int gpus, size_t bytes, int reps) {
  std::vector<GpuCopySide> sides(static_cast<size_t>(gpus));
  for (int g = 0; g < gpus; ++g) {
    GpuCopySide &x = sides[size_t(g)];
    CHECK_CUDA(cudaSetDevice(g));
    CHECK_CUDA(cudaHostAlloc(&x.h1, bytes, cudaHostAllocPortable));
    CHECK_CUDA(cudaHostAlloc(&x.h2, bytes, cudaHostAllocPortable));
    std::memset(x.h1, 1, bytes);
    CHECK_CUDA(cudaMalloc(&x.d1, bytes));
    CHECK_CUDA(cudaMalloc(&x.d2, bytes));
    CHECK_CUDA(cudaStreamCreate(&x.s1));
    CHECK_CUDA(cudaStreamCreate(&x.s2));
  }
  syncEveryGpu(gpus);
  const double t0 = seconds();
  for (int g = 0; g < gpus; ++g) {
    GpuCopySide &x = sides[size_t(g)];
    CHECK_CUDA(cudaSetDevice(g));
    issueBothWays(x.s1, x.s2, x.d1, x.h1, x.h2, x.d2, bytes, reps);
  }
  syncEveryGpu(gpus);
  const double t = seconds() - t0;
  for (int g = 0; g < gpus; ++g) {
    GpuCopySide &x = sides[size_t(g)];
    CHECK_CUDA(cudaSetDevice(g));
    CHECK_CUDA(cudaStreamDestroy(x.s1));
    CHECK_CUDA(cudaStreamDestroy(x.s2));
    CHECK_CUDA(cudaFree(x.d1));
    CHECK_CUDA(cudaFree(x.d2));
    CHECK_CUDA(cudaFreeHost(x.h1));
    CHECK_CUDA(cudaFreeHost(x.h2));
  }
  CHECK_CUDA(cudaSetDevice(0));
  return 2.0 * double(bytes) * reps * gpus / t / 1e9;
}

// Operands of random values: all-zero matrices let the tensor cores run
// cooler and faster than any real product does.
__global__ void fillRandom(uint8_t *p, size_t bytes, size_t elemBytes) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes / elemBytes;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u;
    h ^= h >> 15;
    float v = float(h & 0xFFFF) / 32768.0f - 1.0f;
    if (elemBytes == 2) reinterpret_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16(v);
    else reinterpret_cast<float *>(p)[i] = v;
  }
}

// Device memory bandwidth (GB/s, read + write) of a device-to-device copy,
// what megac's elementwise kernels are bound by.
static double hbmBandwidth(void *dst, const void *src, size_t bytes, cudaStream_t s) {
  return 2.0 * copyBandwidth(dst, src, bytes, cudaMemcpyDeviceToDevice, s, 5);
}

struct GemmCase {
  const char *name;
  cudaDataType_t type;
  cublasComputeType_t compute;
  size_t elemBytes;
};

// C [m, n] = A [m, k] B [k, n], column-major; C in fp32 where the operands are bf16 (as megac runs them).
static double gemmTflops(cublasLtHandle_t lt, const GemmCase &c, int64_t m, int64_t n, int64_t k, void *ws,
                         size_t wsBytes) {
  void *A, *B, *C;
  const size_t bytesA = size_t(m * k) * c.elemBytes, bytesB = size_t(k * n) * c.elemBytes, bytesC = size_t(m * n) * 4;
  CHECK_CUDA(cudaMalloc(&A, bytesA));
  CHECK_CUDA(cudaMalloc(&B, bytesB));
  CHECK_CUDA(cudaMalloc(&C, bytesC));
  fillRandom<<<4096, 256>>>(static_cast<uint8_t *>(A), bytesA, c.elemBytes);
  fillRandom<<<4096, 256>>>(static_cast<uint8_t *>(B), bytesB, c.elemBytes);
  CHECK_CUDA(cudaGetLastError());
  cublasLtMatmulDesc_t desc;
  CHECK_LT(cublasLtMatmulDescCreate(&desc, c.compute, CUDA_R_32F));
  cublasLtMatrixLayout_t la, lb, lc;
  CHECK_LT(cublasLtMatrixLayoutCreate(&la, c.type, m, k, m));
  CHECK_LT(cublasLtMatrixLayoutCreate(&lb, c.type, k, n, k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m));
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes,
                                                sizeof wsBytes));
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &heur, &found));
  if (!found) {
    std::fprintf(stderr, "megac_profile: no cuBLASLt algorithm for %s\n", c.name);
    return 0;
  }
  float alpha = 1, beta = 0;
  auto run = [&] {
    CHECK_LT(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &heur.algo, ws, wsBytes, 0));
  };
  for (int i = 0; i < 3; ++i) run();
  CHECK_CUDA(cudaDeviceSynchronize());
  int reps = 20;
  double t0 = seconds();
  for (int i = 0; i < reps; ++i) run();
  CHECK_CUDA(cudaDeviceSynchronize());
  double t = (seconds() - t0) / reps;
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  return 2.0 * double(m) * double(n) * double(k) / t / 1e12;
}

// The median rate over the products of a transformer layer at 16384 tokens
// (hidden 4096, MLP 14336: projections, their input gradients and weight
// gradients), the shapes megac's plans run, not one square product.
static double layerGemmTflops(cublasLtHandle_t lt, const GemmCase &c, void *ws, size_t wsBytes) {
  const int64_t T = 16384, H = 4096, F = 14336;
  const int64_t shapes[][3] = {{T, H, H}, {T, F, H}, {T, H, F}, {H, H, T}, {F, H, T}};
  std::vector<double> r;
  for (const auto &s : shapes) r.push_back(gemmTflops(lt, c, s[0], s[1], s[2], ws, wsBytes));
  std::sort(r.begin(), r.end());
  return r[r.size() / 2];
}

// Seconds of one forward then backward of megac's bf16 attention (cuDNN's
// fused SDPA with its fp32<->bf16 conversions) on shape sh, the backward on
// the forward's stashed residue as a unit's recomputed forward leaves it;
// 0 where cuDNN cannot run it.
static double attentionPassSeconds(megac::cuda::GpuContext &ctx, const megac::cuda::SdpaShape &sh) {
  using namespace megac::cuda;
  const size_t wsBytes = std::max(cudnnSdpaWorkspace(ctx, sh, false), cudnnSdpaWorkspace(ctx, sh, true));
  if (wsBytes == 0) {
    std::fprintf(stderr, "megac_profile: cuDNN has no attention engine: %s\n",
                 cudnnAttentionStats().lastFallback.c_str());
    return 0;
  }
  const size_t qBytes = size_t(sh.batch * sh.qHeads * sh.seq * sh.headDim) * 4;
  const size_t kvBytes = size_t(sh.batch * sh.kvHeads * sh.seq * sh.headDim) * 4;
  const size_t stashBytes = size_t(megac::plan::fusedAttentionStashBytes(sh.batch, sh.qHeads, sh.kvHeads, sh.seq,
                                                                          sh.headDim, sh.vHeadDim));
  void *q, *k, *v, *y, *dy, *dq, *dk, *dv, *ws, *stash;
  for (auto [p, b] : {std::pair{&q, qBytes}, {&y, qBytes}, {&dy, qBytes}, {&dq, qBytes}, {&k, kvBytes}, {&v, kvBytes},
                      {&dk, kvBytes}, {&dv, kvBytes}, {&ws, wsBytes}, {&stash, stashBytes}}) {
    CHECK_CUDA(cudaMalloc(p, b));
    fillRandom<<<4096, 256>>>(static_cast<uint8_t *>(*p), b, 4);
  }
  ctx.attentionStash = stash, ctx.attentionStashBytes = stashBytes;
  const SdpaSource source{q, k, v};
  auto pass = [&] {
    auto f = cudnnSdpaForward(ctx, sh, (float *)q, (float *)k, (float *)v, (float *)y, ws, wsBytes, &source);
    auto b = cudnnSdpaBackward(ctx, sh, (float *)dy, (float *)q, (float *)k, (float *)v, (float *)dq, (float *)dk,
                               (float *)dv, ws, wsBytes, &source);
    bool ok = f && *f && b && *b;
    if (!f) llvm::consumeError(f.takeError());
    if (!b) llvm::consumeError(b.takeError());
    return ok;
  };
  double t = 0;
  const uint64_t stashedBefore = cudnnAttentionStats().stashedBackwardCalls;
  if (pass()) {
    if (cudnnAttentionStats().stashedBackwardCalls == stashedBefore)
      std::fprintf(stderr, "megac_profile: the attention backward ran its own forward (the stash was not taken)\n");
    CHECK_CUDA(cudaStreamSynchronize(ctx.stream));
    const int reps = 5;
    double t0 = seconds();
    for (int i = 0; i < reps; ++i) pass();
    CHECK_CUDA(cudaStreamSynchronize(ctx.stream));
    t = (seconds() - t0) / reps;
  } else {
    std::fprintf(stderr, "megac_profile: the cuDNN attention did not run\n");
  }
  for (void *p : {q, k, v, y, dy, dq, dk, dv, ws, stash}) cudaFree(p);
  ctx.attentionStash = nullptr, ctx.attentionStashBytes = 0;
  return t;
}

// The cost model's attention rates (CostModel.cpp): attention_bf16_tflops in
// its flops (per (batch, q head, query, key) 2(D + Dv) forward and 2(3D + 2Dv)
// backward, halved by the causal mask) and attention_bf16_ps_per_elem, the
// time beyond them per element of Q. Two causal shapes with Q of the same
// size (32 q heads, 8 kv heads, head 128, 16384 tokens) and 4x the flops
// apart, batch 4 x seq 4096 and batch 1 x seq 16384, separate the two:
// t = flops / rate + elements * cost.
struct AttentionRates {
  double tflops = 0, psPerElem = 0;
};
static AttentionRates attentionRates(cudaStream_t s) {
  using namespace megac::cuda;
  GpuContext ctx;
  ctx.stream = s;
  ctx.mode = ComputeMode::BF16;
  std::string why;
  if (!cudnnAttentionBuiltIn() || !createDnnHandle(ctx, &why) || !ctx.dnn) {
    std::fprintf(stderr, "megac_profile: no cuDNN attention (%s)\n", why.c_str());
    return {};
  }
  auto shape = [](int64_t batch, int64_t seq) {
    SdpaShape sh;
    sh.batch = batch, sh.qHeads = 32, sh.kvHeads = 8, sh.seq = seq, sh.headDim = sh.vHeadDim = 128;
    sh.causal = true, sh.scale = 1.0f / std::sqrt(128.0f);
    return sh;
  };
  auto flops = [](const SdpaShape &sh) {
    return double(sh.batch * sh.qHeads) * double(sh.seq) * double(sh.seq) * 0.5 * (2.0 * 256 + 2.0 * 640);
  };
  const SdpaShape shortSeq = shape(4, 4096), longSeq = shape(1, 16384);
  const double tShort = attentionPassSeconds(ctx, shortSeq), tLong = attentionPassSeconds(ctx, longSeq);
  destroyDnnHandle(ctx);
  if (tShort <= 0 || tLong <= 0) return {};
  const double elements = double(shortSeq.batch * shortSeq.qHeads * shortSeq.seq * shortSeq.headDim);
  AttentionRates r;
  if (tLong > tShort) { // else noise: one rate for both
    const double secondsPerFlop = (tLong - tShort) / (flops(longSeq) - flops(shortSeq));
    r.tflops = 1.0 / secondsPerFlop / 1e12;
    r.psPerElem = std::max(0.0, tShort - flops(shortSeq) * secondsPerFlop) / elements * 1e12;
  }
  if (!(r.psPerElem > 0)) r = {flops(shortSeq) / tShort / 1e12, 0.0};
  std::fprintf(stderr, "megac_profile: attention pass %.2f ms at batch 4 x seq 4096, %.2f ms at 1 x 16384\n",
               tShort * 1e3, tLong * 1e3);
  return r;
}

static double hostMemcpyBandwidth(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  int threads = megac::cpu::numThreads();
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double t0 = seconds();
    megac::cpu::parallelFor(int64_t(threads), int64_t(1) << 30, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        size_t chunk = bytes / size_t(threads);
        std::memcpy(b.data() + t * chunk, a.data() + t * chunk, chunk);
      }
    });
    double t = seconds() - t0;
    best = std::max(best, 2.0 * double(bytes) / t / 1e9); // read + write
  }
  return best;
}

// With `bf16Copy`, the update also writes each new weight's bf16 rounding (a
// streamed weight's copy, --bf16-weight-stream).
static double adamwParamsPerSecond(int64_t n, bool bf16Copy = false) {
  // Touch the pages from the threads that will use them (first-touch NUMA placement).
  std::unique_ptr<float[]> p(new float[size_t(n)]), g(new float[size_t(n)]), m(new float[size_t(n)]),
      v(new float[size_t(n)]);
  std::unique_ptr<uint16_t[]> copy(bf16Copy ? new uint16_t[size_t(n)] : nullptr);
  megac::cpu::parallelFor(n, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      p[i] = 0.1f;
      g[i] = 0.01f;
      m[i] = 0.0f;
      v[i] = 0.0f;
      if (bf16Copy) copy[i] = 0;
    }
  });
  megac::runtime::AdamWHyper h;
  double best = 0;
  for (int step = 1; step <= 4; ++step) {
    double t0 = seconds();
    megac::runtime::adamwUpdateParallel(p.get(), g.get(), m.get(), v.get(), n, step, h, true, 1.0f, copy.get());
    double t = seconds() - t0;
    if (step > 1) best = std::max(best, double(n) / t);
  }
  return best;
}

// The CPU AdamW and both-way pinned copies at once, as the backward runs
// them (they share the host's memory bandwidth): AdamW steps over n
// parameters repeat while `reps` copies of `bytes` each way run; returns the
// AdamW rate (parameters/s) and the copies' summed rate (GB/s).
static std::pair<double, double> adamwUnderDma(int64_t n, void *dDst, const void *hSrc, void *hDst, const void *dSrc,
                                               size_t bytes, int reps) {
  std::unique_ptr<float[]> p(new float[size_t(n)]), g(new float[size_t(n)]), m(new float[size_t(n)]),
      v(new float[size_t(n)]);
  megac::cpu::parallelFor(n, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = 0.1f, g[i] = 0.01f, m[i] = 0.0f, v[i] = 0.0f;
  });
  megac::runtime::AdamWHyper h;
  megac::runtime::adamwUpdateParallel(p.get(), g.get(), m.get(), v.get(), n, 1, h, true); // warm
  cudaStream_t s1, s2;
  CHECK_CUDA(cudaStreamCreate(&s1));
  CHECK_CUDA(cudaStreamCreate(&s2));
  CHECK_CUDA(cudaDeviceSynchronize());
  double t0 = seconds();
  issueBothWays(s1, s2, dDst, hSrc, hDst, dSrc, bytes, reps);
  int64_t updated = 0;
  double adamwEnd = t0;
  for (int step = 2; cudaStreamQuery(s1) == cudaErrorNotReady || cudaStreamQuery(s2) == cudaErrorNotReady; ++step) {
    megac::runtime::adamwUpdateParallel(p.get(), g.get(), m.get(), v.get(), n, step, h, true);
    updated += n;
    adamwEnd = seconds();
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  double copies = seconds() - t0;
  return {double(updated) / (adamwEnd - t0), 2.0 * double(bytes) * reps / copies / 1e9};
}

int main(int argc, char **argv) {
  const char *out = argc > 1 ? argv[1] : nullptr;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  size_t freeB, totalB;
  CHECK_CUDA(cudaMemGetInfo(&freeB, &totalB));

  const size_t bytes = size_t(1) << 30;
  void *h1, *h2, *d1, *d2;
  CHECK_CUDA(cudaHostAlloc(&h1, bytes, cudaHostAllocDefault));
  CHECK_CUDA(cudaHostAlloc(&h2, bytes, cudaHostAllocDefault));
  CHECK_CUDA(cudaMalloc(&d1, bytes));
  CHECK_CUDA(cudaMalloc(&d2, bytes));
  std::memset(h1, 1, bytes);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  double h2d = copyBandwidth(d1, h1, bytes, cudaMemcpyHostToDevice, s, 5);
  double d2h = copyBandwidth(h2, d2, bytes, cudaMemcpyDeviceToHost, s, 5);
  double both = bothWays(d1, h1, h2, d2, bytes, 5);
  double hbm = hbmBandwidth(d2, d1, bytes, s);
  std::vector<char> pageable(bytes / 4, 1);
  double pageableH2d = copyBandwidth(d1, pageable.data(), pageable.size(), cudaMemcpyHostToDevice, s, 3);

  cublasLtHandle_t lt;
  CHECK_LT(cublasLtCreate(&lt));
  size_t wsBytes = size_t(64) << 20;
  void *ws;
  CHECK_CUDA(cudaMalloc(&ws, wsBytes));
  double bf16 = layerGemmTflops(lt, {"bf16", CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2}, ws, wsBytes);
  double tf32 = layerGemmTflops(lt, {"tf32", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4}, ws, wsBytes);
  const int n = 8192; // fp32 (no tensor cores) is slow: one square product
  double fp32 = gemmTflops(lt, {"fp32", CUDA_R_32F, CUBLAS_COMPUTE_32F, 4}, n, n, n, ws, wsBytes);
  AttentionRates attention = attentionRates(s);
  double hostBw = hostMemcpyBandwidth(size_t(1) << 30);
  double adamw = adamwParamsPerSecond(int64_t(1) << 27);
  double adamwBf16Copy = adamwParamsPerSecond(int64_t(1) << 27, true);
  // About 1.3 s of copies; AdamW over 2^25 parameters (8 ms a step alone) keeps pace.
  auto [adamwDma, bothAdamw] = adamwUnderDma(int64_t(1) << 25, d1, h1, h2, d2, bytes, 64);
  int gpus = 1;
  CHECK_CUDA(cudaGetDeviceCount(&gpus));
  const double allGpusBoth = allGpusBothWays(gpus, size_t(1) << 28, 8);

  std::string profile;
  char line[256];
  auto add = [&](const char *k, double v) {
    std::snprintf(line, sizeof line, "%s = %.4g\n", k, v);
    profile += line;
  };
  profile += std::string("# megac machine profile: ") + prop.name + ", " + std::to_string(megac::cpu::numThreads()) +
             " CPU threads\n";
  add("pcie_h2d_gbps", h2d);
  add("pcie_d2h_gbps", d2h);
  add("pcie_both_gbps", both);
  add("pcie_pageable_h2d_gbps", pageableH2d);
  add("gemm_bf16_tflops", bf16);
  add("gemm_tf32_tflops", tf32);
  add("gemm_fp32_tflops", fp32);
  add("gpu_hbm_gbps", hbm);
  if (attention.tflops > 0) add("attention_bf16_tflops", attention.tflops);
  if (attention.psPerElem > 0) add("attention_bf16_ps_per_elem", attention.psPerElem);
  add("host_mem_gbps", hostBw);
  add("cpu_adamw_params_per_s", adamw);
  // Not a key (the cost model charges the copy as a constant share of the
  // update: codegen/CostModel.cpp); here to check that share on a machine.
  std::snprintf(line, sizeof line, "# cpu AdamW writing bf16 copies: %.4g params/s (%.3f of the rate without)\n",
                adamwBf16Copy, adamwBf16Copy / adamw);
  profile += line;
  add("cpu_adamw_under_dma_params_per_s", adamwDma);
  add("pcie_both_under_adamw_gbps", bothAdamw);
  add("gpus", gpus);
  add("pcie_all_gpus_both_gbps", allGpusBoth);
  add("gpu_mem_gib", double(totalB) / double(1ull << 30));
  add("gpu_mem_free_gib", double(freeB) / double(1ull << 30));
  std::fputs(profile.c_str(), stdout);
  if (out) {
    FILE *f = std::fopen(out, "w");
    if (!f) {
      std::fprintf(stderr, "megac_profile: cannot write %s\n", out);
      return 1;
    }
    std::fputs(profile.c_str(), f);
    std::fclose(f);
  }
  return 0;
}
