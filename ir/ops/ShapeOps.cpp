#include "ir/OpSchema.h"

namespace megac::ir {

void registerShapeSchemas() {}

} // namespace megac::ir
