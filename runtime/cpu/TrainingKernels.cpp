#include "runtime/cpu/Kernel.h"

namespace megac::cpu {

void registerTrainingKernels() {}

} // namespace megac::cpu
