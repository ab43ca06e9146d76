#include "ir/Verifier.h"

namespace megac::ir {

llvm::Error verifyGraph(const Graph &g) { return llvm::Error::success(); }

} // namespace megac::ir
