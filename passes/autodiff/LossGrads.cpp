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

} // namespace

void registerLossGrads() { registerGradRule("megac.SoftmaxCrossEntropy", softmaxCrossEntropyGrad); }

} // namespace megac::autodiff
