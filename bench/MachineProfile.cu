// megac_profile: measures what megac's cost model needs on this machine and
// prints it as a machine profile (key = value lines) plus a table:
// host<->device bandwidth (pinned, each way and both at once), pageable
// H2D, GEMM throughput per compute type (cuBLASLt), host memory bandwidth,
// CPU AdamW throughput (megac's own kernel), and GPU memory.
#include "runtime/cpu/Kernel.h"
#include "runtime/train/AdamW.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
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

static double bothWays(void *dDst, const void *hSrc, void *hDst, const void *dSrc, size_t bytes, int reps) {
  cudaStream_t s1, s2;
  CHECK_CUDA(cudaStreamCreate(&s1));
  CHECK_CUDA(cudaStreamCreate(&s2));
  CHECK_CUDA(cudaDeviceSynchronize());
  double t0 = seconds();
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaMemcpyAsync(dDst, hSrc, bytes, cudaMemcpyHostToDevice, s1));
    CHECK_CUDA(cudaMemcpyAsync(hDst, dSrc, bytes, cudaMemcpyDeviceToHost, s2));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  double t = seconds() - t0;
  return 2.0 * double(bytes) * reps / t / 1e9;
}

struct GemmCase {
  const char *name;
  cudaDataType_t type;
  cublasComputeType_t compute;
  size_t elemBytes;
};

static double gemmTflops(cublasLtHandle_t lt, const GemmCase &c, int n, void *ws, size_t wsBytes) {
  void *A, *B, *C;
  size_t bytes = size_t(n) * n * c.elemBytes;
  CHECK_CUDA(cudaMalloc(&A, bytes));
  CHECK_CUDA(cudaMalloc(&B, bytes));
  CHECK_CUDA(cudaMalloc(&C, bytes));
  CHECK_CUDA(cudaMemset(A, 0, bytes));
  CHECK_CUDA(cudaMemset(B, 0, bytes));
  cublasLtMatmulDesc_t desc;
  CHECK_LT(cublasLtMatmulDescCreate(&desc, c.compute, CUDA_R_32F));
  cublasLtMatrixLayout_t la, lb, lc;
  CHECK_LT(cublasLtMatrixLayoutCreate(&la, c.type, n, n, n));
  CHECK_LT(cublasLtMatrixLayoutCreate(&lb, c.type, n, n, n));
  CHECK_LT(cublasLtMatrixLayoutCreate(&lc, c.type, n, n, n));
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
  return 2.0 * double(n) * n * n / t / 1e12;
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

static double adamwParamsPerSecond(int64_t n) {
  // Touch the pages from the threads that will use them (first-touch NUMA placement).
  std::unique_ptr<float[]> p(new float[size_t(n)]), g(new float[size_t(n)]), m(new float[size_t(n)]),
      v(new float[size_t(n)]);
  megac::cpu::parallelFor(n, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      p[i] = 0.1f;
      g[i] = 0.01f;
      m[i] = 0.0f;
      v[i] = 0.0f;
    }
  });
  megac::runtime::AdamWHyper h;
  double best = 0;
  for (int step = 1; step <= 4; ++step) {
    double t0 = seconds();
    megac::runtime::adamwUpdateParallel(p.get(), g.get(), m.get(), v.get(), n, step, h, true);
    double t = seconds() - t0;
    if (step > 1) best = std::max(best, double(n) / t);
  }
  return best;
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
  std::vector<char> pageable(bytes / 4, 1);
  double pageableH2d = copyBandwidth(d1, pageable.data(), pageable.size(), cudaMemcpyHostToDevice, s, 3);

  cublasLtHandle_t lt;
  CHECK_LT(cublasLtCreate(&lt));
  size_t wsBytes = size_t(64) << 20;
  void *ws;
  CHECK_CUDA(cudaMalloc(&ws, wsBytes));
  const int n = 8192;
  double bf16 = gemmTflops(lt, {"bf16", CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2}, n, ws, wsBytes);
  double tf32 = gemmTflops(lt, {"tf32", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4}, n, ws, wsBytes);
  double fp32 = gemmTflops(lt, {"fp32", CUDA_R_32F, CUBLAS_COMPUTE_32F, 4}, n, ws, wsBytes);
  double hostBw = hostMemcpyBandwidth(size_t(1) << 30);
  double adamw = adamwParamsPerSecond(int64_t(1) << 27);

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
  add("host_mem_gbps", hostBw);
  add("cpu_adamw_params_per_s", adamw);
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
