#include "runtime/cpu/Kernel.h"

namespace megac::cpu {

// NormKernels.cpp, AttentionKernels.cpp, RotaryKernels.cpp
void registerNormKernels();
void registerAttentionKernels();
void registerRotaryKernels();

void registerMatMulKernels();  // MatMulKernels.cpp
void registerSoftmaxKernels(); // SoftmaxKernels.cpp
void registerSwiGLUKernels();  // SwiGLUKernels.cpp

void registerNNKernels() {
  registerMatMulKernels();
  registerSoftmaxKernels();
  registerNormKernels();
  registerAttentionKernels();
  registerRotaryKernels();
  registerSwiGLUKernels();
}

} // namespace megac::cpu
