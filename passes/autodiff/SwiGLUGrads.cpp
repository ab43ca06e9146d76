// Gradient rule of megac.SwiGLU(G, U) = G * sigmoid(G) * U: the fused
// megac.SwiGLUGrad(dY, G, U) gives both dG and dU from one pass over the
// data (it recomputes the sigmoid instead of keeping it).
#include "passes/autodiff/Autodiff.h"

namespace megac::autodiff {

namespace {

void swigluRule(GradContext &c) {
  auto g = c.opN("megac.SwiGLUGrad", {c.gradOutput(0), c.input(0), c.input(1)}, 2);
  if (g.size() == 2) {
    c.addGrad(0, g[0]);
    c.addGrad(1, g[1]);
  }
}

} // namespace

void registerSwiGLUGrads() { registerGradRule("megac.SwiGLU", swigluRule); }

} // namespace megac::autodiff
