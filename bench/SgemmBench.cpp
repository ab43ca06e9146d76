// megac_sgemm_bench [M [N [K [transA transB]]]]: times cpu::sgemm on random
// data (MEGAC_THREADS threads, MEGAC_GEMM_KERNEL=avx512|avx2|generic to
// force a micro-kernel) and prints the median and best GFLOP/s of one-second
// worth of runs, after checking a few entries against a double-precision dot.
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Kernel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace megac::cpu;

int main(int argc, char **argv) {
  auto arg = [&](int i, int64_t dflt) { return argc > i ? std::atoll(argv[i]) : dflt; };
  const int64_t M = arg(1, 512), N = arg(2, M), K = arg(3, M);
  const bool transA = arg(4, 0) != 0, transB = arg(5, 0) != 0;
  const int64_t lda = transA ? M : K, ldb = transB ? K : N;
  std::vector<float> A(size_t(M * K)), B(size_t(K * N)), C(size_t(M * N));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float &x : A) x = dist(rng);
  for (float &x : B) x = dist(rng);

  sgemm(transA, transB, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N);
  double maxErr = 0;
  for (int t = 0; t < 64 && M * N > 0; ++t) {
    int64_t i = int64_t(rng() % uint64_t(M)), j = int64_t(rng() % uint64_t(N));
    double s = 0;
    for (int64_t k = 0; k < K; ++k)
      s += double(transA ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)]) *
           double(transB ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]);
    maxErr = std::max(maxErr, std::fabs(s - double(C[size_t(i * N + j)])));
  }

  std::vector<double> seconds;
  auto start = std::chrono::steady_clock::now();
  do {
    auto t0 = std::chrono::steady_clock::now();
    sgemm(transA, transB, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), N);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 1.0);
  std::sort(seconds.begin(), seconds.end());
  double flops = 2.0 * double(M) * double(N) * double(K);
  double median = seconds[seconds.size() / 2], best = seconds.front();
  std::printf("sgemm %s, %d threads, M=%lld N=%lld K=%lld transA=%d transB=%d: median %.1f GFLOP/s (%.3f ms), "
              "best %.1f GFLOP/s (%.3f ms), %zu runs, max abs error %.2e\n",
              sgemmKernelName(), numThreads(), (long long)M, (long long)N, (long long)K, int(transA), int(transB),
              flops / median / 1e9, median * 1e3, flops / best / 1e9, best * 1e3, seconds.size(), maxErr);
  return maxErr < 1e-3 * std::sqrt(double(std::max<int64_t>(K, 1))) ? 0 : 1;
}
