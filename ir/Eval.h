#pragma once
// Evaluates IR ops on the CPU reference kernels: used by constant folding
// and by `megac forward`.
#include "ir/Graph.h"

#include <map>

namespace megac::ir {

// Runs op `opIndex` on the given input tensors (nullptr for omitted inputs)
// and returns its outputs, shaped as the IR types say.
llvm::Expected<std::vector<Tensor>> evalOp(Graph &g, int32_t opIndex, const std::vector<const Tensor *> &inputs);

// Runs the whole graph. `feeds` binds graph inputs by name. Returns the
// graph outputs in order. Intermediate tensors are freed after their last use.
llvm::Expected<std::vector<Tensor>> runGraph(Graph &g, const std::map<std::string, Tensor> &feeds);

} // namespace megac::ir
