// append-loss: adds the training loss, the mean token cross-entropy of the
// logits (the first graph output) against a new int64 input `targets`
// (already shifted). The loss becomes the graph's only output.
#include "ir/OpSchema.h"
#include "passes/Pass.h"
#include "passes/autodiff/GradBuilder.h"

namespace megac::passes {

using namespace ir;

llvm::Error appendLoss(Graph &g, const PassOptions &opts) {
  if (g.outputs.empty()) return graphError(g, "append-loss: the graph has no output");
  ValueId logits = g.outputs[0];
  const TensorType &lt = g.type(logits);
  if (!isFloatType(lt.dtype) || lt.shape.size() < 2)
    return graphError(g, "append-loss: the first output '" + g.value(logits).name + "' is " + lt.str() +
                             "; expected logits [..., vocab]");
  Value t;
  t.name = g.uniqueName("targets");
  t.kind = ValueKind::Input;
  t.type = {DType::I64, Shape(lt.shape.begin(), lt.shape.end() - 1), false};
  ValueId targets = g.addValueUnique(std::move(t));
  g.inputs.push_back(targets);
  autodiff::GradBuilder b(g, "loss");
  Attrs a;
  a.set("ignore_index", Attr::ofInt(opts.ignoreIndex));
  ValueId loss = b.op("megac.SoftmaxCrossEntropy", {logits, targets}, a);
  if (b.failed()) return b.takeError();
  g.value(loss).name = g.uniqueName("loss");
  g.compact(); // refresh the name index after the rename
  g.outputs = {g.lookup("loss")};
  return llvm::Error::success();
}

} // namespace megac::passes
