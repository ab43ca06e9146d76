#include "frontend/ImportHooks.h"

namespace megac::frontend {

void registerSoftmaxImports(); // SoftmaxImports.cpp

void registerNNImports() {
  registerSoftmaxImports();
}

} // namespace megac::frontend
