#include "ir/Verifier.h"
#include "passes/Pass.h"

namespace megac::passes {

llvm::Error verify(ir::Graph &g, const PassOptions &) { return ir::verifyGraph(g); }

} // namespace megac::passes
