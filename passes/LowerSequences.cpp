// lower-sequences: placeholder until the shape family lands.
#include "passes/Pass.h"

namespace megac::passes {

llvm::Error lowerSequences(ir::Graph &g, const PassOptions &) { return llvm::Error::success(); }

} // namespace megac::passes
