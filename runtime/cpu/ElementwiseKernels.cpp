#include "runtime/cpu/Kernel.h"

namespace megac::cpu {

void registerElementwiseKernels() {}

} // namespace megac::cpu
