#include "frontend/ImportHooks.h"

namespace megac::frontend {

void registerShapeImports() {}

} // namespace megac::frontend
