#include "runtime/cpu/Kernel.h"

namespace megac::cpu {

void registerReductionKernels() {}

} // namespace megac::cpu
