#pragma once
// Appends ops to a graph with their types inferred by the op schemas. Errors
// are sticky: the first one is kept and later calls return kNoValue, so
// gradient rules read as straight-line code; check error() at the end.
#include "ir/Graph.h"

#include <string>
#include <vector>

namespace megac::autodiff {

using ir::ValueId;

class GradBuilder {
public:
  explicit GradBuilder(ir::Graph &g, std::string hint = "grad") : nameHint(std::move(hint)), g_(g) {}

  ir::Graph &graph() { return g_; }
  // Appends `type(inputs) {attrs}` with `numOutputs` results and infers types.
  std::vector<ValueId> opN(const std::string &type, std::vector<ValueId> inputs, size_t numOutputs,
                           Attrs attrs = {});
  ValueId op(const std::string &type, std::vector<ValueId> inputs, Attrs attrs = {}) {
    auto r = opN(type, std::move(inputs), 1, std::move(attrs));
    return r.empty() ? ir::kNoValue : r[0];
  }
  // A scalar constant of the given dtype.
  ValueId scalar(double v, DType dtype);
  ValueId int64s(const std::vector<int64_t> &v);
  // Sums `g` over broadcast dimensions down to `shape` (no-op if equal).
  ValueId sumToShape(ValueId g, const Shape &shape);
  // x + y (kNoValue operands are treated as absent).
  ValueId add(ValueId x, ValueId y);

  const ir::TensorType &type(ValueId v) const { return g_.type(v); }
  DType dtype(ValueId v) const { return g_.type(v).dtype; }
  const Shape &shape(ValueId v) const { return g_.type(v).shape; }

  void fail(llvm::Error e);
  bool failed() const { return bool(err_); }
  llvm::Error takeError() { return err_ ? std::move(*err_) : llvm::Error::success(); }
  ~GradBuilder() {
    if (err_) llvm::consumeError(std::move(*err_));
  }

  // Prefix of the names of emitted ops and values.
  std::string nameHint;

private:
  ir::Graph &g_;
  std::optional<llvm::Error> err_;
};

} // namespace megac::autodiff
