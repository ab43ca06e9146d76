#include "runtime/cpu/ShapeSemantics.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <cmath>

namespace megac::cpu {

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

llvm::Expected<int64_t> normalizeAxisIn(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return fail("axis " + llvm::Twine(axis) + " is out of range for rank " + llvm::Twine(rank));
  return axis < 0 ? axis + rank : axis;
}

llvm::Expected<std::vector<SliceDim>> resolveSlice(const Shape &data, const std::vector<int64_t> &starts,
                                                   const std::vector<int64_t> &ends,
                                                   const std::vector<int64_t> &axes,
                                                   const std::vector<int64_t> &steps) {
  int64_t rank = int64_t(data.size());
  size_t n = starts.size();
  if (ends.size() != n)
    return fail("starts has " + llvm::Twine(n) + " entries but ends has " + llvm::Twine(ends.size()));
  if (!axes.empty() && axes.size() != n)
    return fail("starts has " + llvm::Twine(n) + " entries but axes has " + llvm::Twine(axes.size()));
  if (!steps.empty() && steps.size() != n)
    return fail("starts has " + llvm::Twine(n) + " entries but steps has " + llvm::Twine(steps.size()));
  if (axes.empty() && int64_t(n) > rank)
    return fail("starts has " + llvm::Twine(n) + " entries but the data has rank " + llvm::Twine(rank));

  std::vector<SliceDim> dims(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) dims[size_t(d)] = {0, 1, data[size_t(d)]};
  std::vector<bool> seen(size_t(rank), false);
  for (size_t i = 0; i < n; ++i) {
    auto axis = normalizeAxisIn(axes.empty() ? int64_t(i) : axes[i], rank);
    if (!axis) return axis.takeError();
    if (seen[size_t(*axis)]) return fail("axis " + llvm::Twine(*axis) + " is sliced twice");
    seen[size_t(*axis)] = true;
    int64_t dim = data[size_t(*axis)];
    int64_t step = steps.empty() ? 1 : steps[i];
    if (step == 0) return fail("step of axis " + llvm::Twine(*axis) + " is 0");
    int64_t start = starts[i], end = ends[i];
    // Negative starts/ends count from the back; INT64_MIN + dim cannot overflow.
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    int64_t count;
    if (dim == 0) {
      count = 0;
    } else if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      count = end > start ? (end - start + step - 1) / step : 0;
    } else {
      // The spec's clamp (as onnxruntime): a start still below 0 reads index 0,
      // where numpy would give an empty slice.
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      // -step cannot overflow: step is INT64_MIN only by malice; treat it as "one element".
      int64_t back = step == INT64_MIN ? INT64_MAX : -step;
      count = start > end ? (start - end + back - 1) / back : 0;
    }
    dims[size_t(*axis)] = {count ? start : 0, step, count};
  }
  return dims;
}

llvm::Expected<std::vector<int64_t>> resolvePads(int64_t rank, const std::vector<int64_t> &pads,
                                                 const std::vector<int64_t> &axes) {
  std::vector<int64_t> full(size_t(2 * rank), 0);
  size_t n = axes.empty() ? size_t(rank) : axes.size();
  if (pads.size() != 2 * n)
    return fail("pads has " + llvm::Twine(pads.size()) + " entries; expected " + llvm::Twine(2 * n) + " (2 x " +
                (axes.empty() ? "rank" : "number of axes") + ")");
  std::vector<bool> seen(size_t(rank), false);
  for (size_t i = 0; i < n; ++i) {
    auto axis = normalizeAxisIn(axes.empty() ? int64_t(i) : axes[i], rank);
    if (!axis) return axis.takeError();
    if (seen[size_t(*axis)]) return fail("axis " + llvm::Twine(*axis) + " is padded twice");
    seen[size_t(*axis)] = true;
    full[size_t(*axis)] = pads[i];
    full[size_t(*axis + rank)] = pads[i + n];
  }
  return full;
}

llvm::Expected<int64_t> rangeCount(const Tensor &start, const Tensor &limit, const Tensor &delta) {
  if (start.numel() != 1 || limit.numel() != 1 || delta.numel() != 1)
    return fail("start, limit and delta must be scalars");
  if (isFloatType(start.dtype())) {
    double s = start.getAsDouble(0), l = limit.getAsDouble(0), d = delta.getAsDouble(0);
    if (d == 0) return fail("delta is 0");
    double c = std::ceil((l - s) / d);
    if (!std::isfinite(c)) return fail("the number of elements is not finite");
    return c > 0 ? int64_t(c) : 0;
  }
  int64_t s = start.getAsInt(0), l = limit.getAsInt(0), d = delta.getAsInt(0);
  if (d == 0) return fail("delta is 0");
  if (d > 0) return l > s ? (l - s + d - 1) / d : 0;
  return s > l ? (s - l + (-d) - 1) / (-d) : 0;
}

} // namespace megac::cpu
