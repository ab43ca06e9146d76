#include "ir/OpSchema.h"

namespace megac::ir {

void registerReductionSchemas() {}

} // namespace megac::ir
