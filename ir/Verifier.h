#pragma once
#include "ir/Graph.h"

namespace megac::ir {

// Checks the IR's invariants: ops in topological order, every input defined
// before use, every value typed, one producer per result, known op types with
// the right arity, initializers with data matching their type.
llvm::Error verifyGraph(const Graph &g);

} // namespace megac::ir
