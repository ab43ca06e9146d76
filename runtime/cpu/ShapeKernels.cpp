#include "runtime/cpu/Kernel.h"

namespace megac::cpu {

void registerShapeKernels() {}

} // namespace megac::cpu
