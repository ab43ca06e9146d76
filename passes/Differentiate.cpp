// autodiff: appends the gradient of the loss (the first output, a scalar)
// with respect to every parameter, and makes each one a graph output named
// "grad:<parameter name>" after the loss. Parameters the loss does not
// depend on get zeros. Constants and frozen parameters get none.
#include "passes/Pass.h"
#include "passes/autodiff/Autodiff.h"

#include <algorithm>

namespace megac::passes {

using namespace ir;

llvm::Error differentiateLoss(Graph &g, const PassOptions &) {
  if (g.outputs.empty() || !g.type(g.outputs[0]).shape.empty())
    return graphError(g, "autodiff: the first output must be the scalar loss (run append-loss first)");
  ValueId loss = g.outputs[0];
  std::vector<ValueId> params;
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].kind == ValueKind::Param) params.push_back(ValueId(i));
  autodiff::GradBuilder b(g, "seed");
  ValueId seed = b.scalar(1.0, g.type(loss).dtype);
  auto r = autodiff::differentiate(g, {loss}, {seed}, params);
  if (!r) return r.takeError();
  std::vector<ValueId> outs{loss};
  for (size_t k = 0; k < params.size(); ++k) {
    ValueId gv = r->grads[k];
    const TensorType &pt = g.type(params[k]);
    if (gv == kNoValue) {
      gv = g.addConst("zeros", Tensor(pt.dtype, pt.shape));
    } else if (g.value(gv).kind != ValueKind::Result || g.value(gv).producer < 0 ||
               std::find(outs.begin(), outs.end(), gv) != outs.end()) {
      gv = b.op("Identity", {gv}); // each gradient output its own value
      if (b.failed()) return b.takeError();
    }
    g.value(gv).name = "grad:" + g.value(params[k]).name;
    outs.push_back(gv);
  }
  g.outputs = outs;
  g.compact(); // re-index the renamed values
  return llvm::Error::success();
}

} // namespace megac::passes
