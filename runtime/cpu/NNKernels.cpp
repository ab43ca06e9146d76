#include "runtime/cpu/Kernel.h"

namespace megac::cpu {

void registerNNKernels() {}

} // namespace megac::cpu
