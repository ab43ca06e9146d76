#pragma once
// Numpy-style multidirectional broadcasting for elementwise CPU kernels.
//
// A BroadcastPlan maps N inputs onto the output they broadcast to. Adjacent
// dims that broadcast the same way for every input are merged, so the
// innermost dim (a "row") is as long as possible; inside a row each input
// advances by 1 element (it has that dim) or 0 (it is broadcast along it).
// Same-shape operands collapse to a single row, x + scalar to a single row
// with the scalar's inner stride 0, x[N,M] + bias[M] to N rows of M.
#include "runtime/core/Tensor.h"
#include "runtime/cpu/Kernel.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>

namespace megac::cpu {

// True if `in` broadcasts to `out`: right-aligned, each dim of `in` equal to
// out's or 1, and rank(in) <= rank(out).
bool broadcastsTo(const Shape &in, const Shape &out);

// The numpy broadcast of all shapes, or nullopt when they are incompatible.
std::optional<Shape> broadcastAll(llvm::ArrayRef<Shape> shapes);

class BroadcastPlan {
public:
  using Offsets = llvm::SmallVector<int64_t, 4>;

  // Every input shape must broadcast to `out` (see makeBroadcastPlan for a
  // checked constructor).
  BroadcastPlan(const Shape &out, llvm::ArrayRef<Shape> inputs);

  size_t numInputs() const { return strides_.size(); }
  int64_t numel() const { return numel_; }
  int64_t rowLength() const { return dims_.empty() ? 1 : dims_.back(); }
  int64_t numRows() const { return numel_ == 0 ? 0 : numel_ / rowLength(); }
  // 1 when input k has the row dim, 0 when it is broadcast along it.
  int64_t innerStride(size_t k) const { return dims_.empty() ? 0 : strides_[k].back(); }
  // The merged dims (outermost first) and input k's element stride along each
  // (0 where it is broadcast): for backends that index the space themselves.
  const Shape &dims() const { return dims_; }
  int64_t stride(size_t k, size_t d) const { return strides_[k][d]; }

  // Calls fn(outOffset, inOffsets, length) for rows [begin, end); inOffsets[k]
  // is the element offset of the row's first element in input k.
  template <class Fn> void forRows(int64_t begin, int64_t end, Fn &&fn) const;

  // Covers every output element with contiguous pieces, calling
  // fn(outOffset, inOffsets, length) for each; runs pieces on several threads
  // when the work (costPerElem per element) is large. A single-row plan is
  // split inside the row.
  template <class Fn> void run(int64_t costPerElem, Fn &&fn) const;

private:
  Shape dims_;                               // merged output dims; the last is the row
  std::vector<llvm::SmallVector<int64_t, 6>> strides_; // [input][dim], in elements
  int64_t numel_ = 0;
};

// Checks that each input broadcasts to `out` and builds the plan; the error
// names opType and the offending shapes.
llvm::Expected<BroadcastPlan> makeBroadcastPlan(llvm::StringRef opType, const Shape &out,
                                                llvm::ArrayRef<const Tensor *> inputs);

// Copies src into dst, broadcasting src to dst's shape (same dtype).
llvm::Error broadcastCopy(llvm::StringRef opType, const Tensor &src, Tensor &dst);

template <class Fn> void BroadcastPlan::forRows(int64_t begin, int64_t end, Fn &&fn) const {
  if (begin >= end) return;
  const size_t outer = dims_.empty() ? 0 : dims_.size() - 1;
  const size_t n = numInputs();
  llvm::SmallVector<int64_t, 6> index(outer, 0);
  Offsets offs(n, 0);
  // Position the odometer at row `begin`.
  int64_t rest = begin;
  for (size_t d = outer; d-- > 0;) {
    index[d] = rest % dims_[d];
    rest /= dims_[d];
    for (size_t k = 0; k < n; ++k) offs[k] += index[d] * strides_[k][d];
  }
  const int64_t len = rowLength();
  for (int64_t row = begin; row < end; ++row) {
    fn(row * len, static_cast<const int64_t *>(offs.data()), len);
    for (size_t d = outer; d-- > 0;) {
      ++index[d];
      for (size_t k = 0; k < n; ++k) offs[k] += strides_[k][d];
      if (index[d] < dims_[d]) break;
      index[d] = 0;
      for (size_t k = 0; k < n; ++k) offs[k] -= strides_[k][d] * dims_[d];
    }
  }
}

template <class Fn> void BroadcastPlan::run(int64_t costPerElem, Fn &&fn) const {
  if (numel_ == 0) return;
  if (numRows() == 1) {
    parallelFor(numel_, costPerElem, [&](int64_t b, int64_t e) {
      Offsets offs(numInputs());
      for (size_t k = 0; k < numInputs(); ++k) offs[k] = b * innerStride(k);
      fn(b, static_cast<const int64_t *>(offs.data()), e - b);
    });
    return;
  }
  parallelFor(numRows(), costPerElem * rowLength(), [&](int64_t b, int64_t e) { forRows(b, e, fn); });
}

} // namespace megac::cpu
