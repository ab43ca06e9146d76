#pragma once
// CPU reference kernels: fp32 (and the integer/bool types that shape
// arithmetic and the ONNX conformance tests need), threads where cheap.
// Kernels take tensors and attributes only; they know nothing of the IR.
#include "runtime/core/Attrs.h"
#include "runtime/core/Tensor.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <string>
#include <vector>

namespace megac::cpu {

struct KernelContext {
  const Attrs &attrs;
  std::vector<const Tensor *> inputs; // nullptr for an omitted optional input
  std::vector<Tensor *> outputs;      // allocated by the caller: final dtype and shape

  size_t numInputs() const { return inputs.size(); }
  const Tensor *input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  Tensor &output(size_t i) const { return *outputs[i]; }
};

using KernelFn = llvm::Error (*)(KernelContext &);

void registerKernel(llvm::StringRef opType, KernelFn fn);
// nullptr if no CPU kernel exists for opType.
KernelFn lookupKernel(llvm::StringRef opType);

// Runs the kernel for opType; an error names the op type where no kernel exists.
llvm::Error runKernel(llvm::StringRef opType, KernelContext &ctx);

// An error whose message is "OP: msg".
llvm::Error kernelError(llvm::StringRef opType, const llvm::Twine &msg);

// Each family registers its kernels; Registry.cpp calls them all once.
void registerElementwiseKernels();
void registerShapeKernels();
void registerReductionKernels();
void registerNNKernels();
void registerTrainingKernels();

// Number of worker threads for kernels (MEGAC_THREADS or hardware concurrency).
int numThreads();
// Runs fn(begin, end) over [0, n) split across threads when n*costPerItem is large.
void parallelFor(int64_t n, int64_t costPerItem, const std::function<void(int64_t, int64_t)> &fn);
// dst[i] += src[i] over n floats (one fp32 rounding each), split over the
// threads where n is large (gradient sums: 2.8B parameters took 2.8 s on one).
void addInto(float *dst, const float *src, int64_t n);

} // namespace megac::cpu
