// Gradient rules of megac's loss ops.
#include "passes/autodiff/Autodiff.h"

namespace megac::autodiff {

namespace {

// loss = mean over non-ignored positions of -log softmax(logits)[target]:
// dlogits = dloss * (softmax(logits) - onehot(target)) / count, fused in
// megac.SoftmaxCrossEntropyGrad. The integer targets get no gradient.
void softmaxCrossEntropyGrad(GradContext &c) {
  c.addGrad(0, c.op("megac.SoftmaxCrossEntropyGrad", {c.gradOutput(0), c.input(0), c.input(1)}, c.attrs()));
}

// The fused head + loss: megac.LinearCrossEntropyGrad recomputes the logits
// a chunk at a time and gives dh and dW (in W's own layout: a Transpose'd
// weight then takes its gradient through the Transpose rule).
void linearCrossEntropyGrad(GradContext &c) {
  if (c.gradOutput(0) == ir::kNoValue) return;
  auto g = c.opN("megac.LinearCrossEntropyGrad", {c.gradOutput(0), c.input(0), c.input(1), c.input(2)}, 2, c.attrs());
  for (size_t i = 0; i < g.size(); ++i)
    if (c.needsGrad(i)) c.addGrad(i, g[i]);
}

} // namespace

void registerLossGrads() {
  registerGradRule("megac.SoftmaxCrossEntropy", softmaxCrossEntropyGrad);
  registerGradRule("megac.LinearCrossEntropy", linearCrossEntropyGrad);
}

} // namespace megac::autodiff
