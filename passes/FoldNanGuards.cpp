// fold-nan-guards: placeholder.
#include "passes/Pass.h"

namespace megac::passes {

llvm::Error foldNanGuards(ir::Graph &g, const PassOptions &) { return llvm::Error::success(); }

} // namespace megac::passes
