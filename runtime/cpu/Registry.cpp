#include "runtime/cpu/Kernel.h"

#include "llvm/ADT/StringMap.h"

#include <cstdlib>
#include <mutex>
#include <thread>

namespace megac::cpu {

static llvm::StringMap<KernelFn> &table() {
  static llvm::StringMap<KernelFn> t;
  return t;
}

static void registerAll() {
  registerElementwiseKernels();
  registerShapeKernels();
  registerReductionKernels();
  registerNNKernels();
  registerTrainingKernels();
}

static void ensureRegistered() {
  static std::once_flag once;
  std::call_once(once, registerAll);
}

void registerKernel(llvm::StringRef opType, KernelFn fn) { table()[opType] = fn; }

KernelFn lookupKernel(llvm::StringRef opType) {
  ensureRegistered();
  auto it = table().find(opType);
  return it == table().end() ? nullptr : it->second;
}

llvm::Error kernelError(llvm::StringRef opType, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), (opType + ": " + msg).str());
}

llvm::Error runKernel(llvm::StringRef opType, KernelContext &ctx) {
  KernelFn fn = lookupKernel(opType);
  if (!fn) return kernelError(opType, "no CPU kernel for this op");
  return fn(ctx);
}

int numThreads() {
  static int n = [] {
    if (const char *e = std::getenv("MEGAC_THREADS")) {
      int v = std::atoi(e);
      if (v > 0) return v;
    }
    unsigned h = std::thread::hardware_concurrency();
    return h ? int(h) : 1;
  }();
  return n;
}

void addInto(float *dst, const float *src, int64_t n) {
  parallelFor(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] += src[i];
  });
}

void parallelFor(int64_t n, int64_t costPerItem, const std::function<void(int64_t, int64_t)> &fn) {
  int t = numThreads();
  const int64_t minWorkPerThread = 1 << 16;
  int64_t byWork = n * std::max<int64_t>(costPerItem, 1) / minWorkPerThread;
  if (byWork < t) t = int(std::max<int64_t>(byWork, 1));
  if (t > n) t = int(std::max<int64_t>(n, 1));
  if (t <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  std::vector<std::thread> workers;
  int64_t chunk = (n + t - 1) / t;
  for (int i = 1; i < t; ++i) {
    int64_t b = i * chunk, e = std::min(n, b + chunk);
    if (b < e) workers.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(0, std::min(n, chunk));
  for (auto &w : workers) w.join();
}

} // namespace megac::cpu
