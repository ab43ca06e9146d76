#include "ir/OpSchema.h"

namespace megac::ir {

void registerElementwiseSchemas() {}

} // namespace megac::ir
