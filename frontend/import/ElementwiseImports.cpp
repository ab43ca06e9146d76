#include "frontend/ImportHooks.h"

namespace megac::frontend {

void registerElementwiseImports() {}

} // namespace megac::frontend
