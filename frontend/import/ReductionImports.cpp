#include "frontend/ImportHooks.h"

namespace megac::frontend {

void registerReductionImports() {}

} // namespace megac::frontend
