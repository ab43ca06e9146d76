#include "frontend/ImportHooks.h"

namespace megac::frontend {

void registerNNImports() {}

} // namespace megac::frontend
