#include "ir/OpSchema.h"

namespace megac::ir {

void registerNormAttentionSchemas(); // NormAttentionOps.cpp
void registerSwiGLUSchemas();        // SwiGLUOps.cpp

void registerMatMulSchemas();  // MatMulOps.cpp
void registerSoftmaxSchemas(); // SoftmaxOps.cpp

void registerNNSchemas() {
  registerMatMulSchemas();
  registerSoftmaxSchemas();
  registerNormAttentionSchemas();
  registerSwiGLUSchemas();
}

} // namespace megac::ir
