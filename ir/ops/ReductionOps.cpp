// Type inference for the Reduce* ops (newest form: axes as optional input 1,
// keepdims, noop_with_empty_axes; the importer moves older opsets' axes
// attribute to that input) and for ArgMax/ArgMin.
#include "ir/OpSchema.h"

#include <algorithm>

namespace megac::ir {

namespace {

bool isReducibleType(DType t, bool allowBool) {
  if (t == DType::Bool) return allowBool;
  return isFloatType(t) || isIntegerType(t);
}

// The reduced dims of input 0, from the constant axes input (if any).
// Empty axes reduce every dim, unless noop_with_empty_axes (then none).
llvm::Expected<std::vector<bool>> reducedDims(InferContext &c, int64_t rank) {
  std::vector<int64_t> axes;
  if (c.hasInput(1)) {
    auto t = c.requireConst(1, "axes");
    if (!t) return t.takeError();
    if ((*t)->dtype() != DType::I64 && (*t)->dtype() != DType::I32)
      return c.error(llvm::Twine("axes must be int64, got ") + dtypeName((*t)->dtype()));
    if ((*t)->rank() > 1) return c.error("axes must be a 1-D tensor");
    axes = (*t)->toInt64Vector();
  }
  if (axes.empty()) {
    bool noop = c.attrs().getInt("noop_with_empty_axes", 0) != 0;
    return std::vector<bool>(size_t(rank), !noop);
  }
  std::vector<bool> reduced(size_t(rank), false);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      return c.error("axis " + llvm::Twine(a) + " is out of range for rank " + llvm::Twine(rank));
    int64_t d = a < 0 ? a + rank : a;
    if (reduced[size_t(d)]) return c.error("axis " + llvm::Twine(a) + " appears twice in axes");
    reduced[size_t(d)] = true;
  }
  return reduced;
}

template <bool AllowBool> llvm::Error inferReduce(InferContext &c) {
  const TensorType &x = *c.inputType(0);
  if (!isReducibleType(x.dtype, AllowBool))
    return c.error(llvm::Twine("element type ") + dtypeName(x.dtype) + " is not supported");
  auto reduced = reducedDims(c, int64_t(x.shape.size()));
  if (!reduced) return reduced.takeError();
  bool keepdims = c.attrs().getInt("keepdims", 1) != 0;
  Shape out;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (!(*reduced)[d]) out.push_back(x.shape[d]);
    else if (keepdims) out.push_back(1);
  }
  c.setOutput(0, x.dtype, out);
  return llvm::Error::success();
}

llvm::Error inferArgReduce(InferContext &c) {
  const TensorType &x = *c.inputType(0);
  if (!isReducibleType(x.dtype, true))
    return c.error(llvm::Twine("element type ") + dtypeName(x.dtype) + " is not supported");
  int64_t rank = int64_t(x.shape.size());
  if (rank == 0) return c.error("input must have rank >= 1");
  auto axis = normalizeAxis(c, c.attrs().getInt("axis", 0), rank);
  if (!axis) return axis.takeError();
  if (x.shape[size_t(*axis)] == 0 && numElements(x.shape) == 0) {
    Shape others = x.shape;
    others.erase(others.begin() + *axis);
    if (numElements(others) != 0) return c.error("cannot take the arg-extreme along an empty axis");
  }
  Shape out = x.shape;
  if (c.attrs().getInt("keepdims", 1) != 0) out[size_t(*axis)] = 1;
  else out.erase(out.begin() + *axis);
  c.setOutput(0, DType::I64, out);
  return llvm::Error::success();
}

} // namespace

void registerReductionSchemas() {
  for (const char *op : {"ReduceSum", "ReduceMean", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp"})
    registerOpSchema({op, 1, 2, 1, 1, inferReduce<false>});
  for (const char *op : {"ReduceMax", "ReduceMin"}) registerOpSchema({op, 1, 2, 1, 1, inferReduce<true>});
  registerOpSchema({"ArgMax", 1, 1, 1, 1, inferArgReduce});
  registerOpSchema({"ArgMin", 1, 1, 1, 1, inferArgReduce});
}

} // namespace megac::ir
