#include "ir/OpSchema.h"

namespace megac::ir {

void registerTrainingSchemas() {}

} // namespace megac::ir
