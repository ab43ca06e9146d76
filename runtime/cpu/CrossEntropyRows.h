#pragma once
// The row arithmetic of softmax cross-entropy, shared by the CPU kernels of
// megac.SoftmaxCrossEntropy[Grad] (TrainingKernels.cpp) and
// megac.LinearCrossEntropy[Grad] (LinearCrossEntropyKernels.cpp), which
// must agree to the rounding.
#include "runtime/cpu/Kernel.h"

#include <algorithm>
#include <cmath>

namespace megac::cpu {

// log(sum(exp(row))) of one row of V logits, in double.
template <class T> double rowLogSumExp(const T *row, int64_t V) {
  double mx = -INFINITY;
  for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(row[v]));
  double s = 0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(double(row[v]) - mx);
  return mx + std::log(s);
}

// d = (softmax(row) - onehot(t)) * scale, where lse is the row's log-sum-exp.
template <class T> void softmaxMinusOneHot(const T *row, int64_t V, int64_t t, double lse, double scale, T *d) {
  for (int64_t v = 0; v < V; ++v) d[v] = T(std::exp(double(row[v]) - lse) * scale);
  d[t] = T(double(d[t]) - scale);
}

// The number of targets[0, rows) other than `ignore`; an error naming `op`
// for one outside [0, V).
inline llvm::Expected<int64_t> countTargets(llvm::StringRef op, const Tensor &targets, int64_t rows, int64_t V,
                                            int64_t ignore) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = targets.getAsInt(r);
    if (t == ignore) continue;
    if (t < 0 || t >= V)
      return kernelError(op, "target " + llvm::Twine(t) + " at position " + llvm::Twine(r) +
                                 " is outside the vocabulary [0, " + llvm::Twine(V) + ")");
    ++count;
  }
  return count;
}

} // namespace megac::cpu
