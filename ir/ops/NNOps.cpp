#include "ir/OpSchema.h"

namespace megac::ir {

void registerNNSchemas() {}

} // namespace megac::ir
