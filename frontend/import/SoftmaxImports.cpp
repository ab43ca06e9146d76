// Before opset 13, Softmax and LogSoftmax coerce the input to 2-D at `axis`
// (default 1) and normalize each row of that matrix, i.e. over all the dims
// from `axis` on. The IR has the opset-13 form only (one axis), so such a
// node becomes Reshape(Softmax(Flatten(x, axis), axis=-1), Shape(x)).
#include "frontend/ImportHooks.h"

namespace megac::frontend {

namespace {

llvm::Error importLegacySoftmax(NodeImport &n) {
  if (n.opset >= 13) return llvm::Error::success();
  if (n.inputs.size() != 1 || n.inputs[0] == ir::kNoValue) return n.error("needs exactly one input");
  int64_t axis = n.attrs.getInt("axis", 1);
  ir::ValueId x = n.inputs[0];
  const ir::TensorType &xt = n.graph.type(x);
  int64_t rank = xt.known() ? int64_t(xt.shape.size()) : -1;
  // Flattening at the last axis changes nothing: only that axis is normalized.
  if (axis == -1 || (rank >= 1 && axis == rank - 1)) {
    n.attrs.set("axis", Attr::ofInt(-1));
    return llvm::Error::success();
  }
  Attrs flattenAttrs, softmaxAttrs;
  flattenAttrs.set("axis", Attr::ofInt(axis));
  softmaxAttrs.set("axis", Attr::ofInt(-1));
  ir::ValueId rows = n.emitOp("Flatten", {x}, flattenAttrs);
  ir::ValueId normalized = n.emitOp(n.type, {rows}, softmaxAttrs);
  ir::ValueId shape = n.emitOp("Shape", {x});
  n.type = "Reshape";
  n.inputs = {normalized, shape};
  n.attrs = Attrs();
  return llvm::Error::success();
}

} // namespace

void registerSoftmaxImports() {
  registerImportHook("Softmax", importLegacySoftmax);
  registerImportHook("LogSoftmax", importLegacySoftmax);
}

} // namespace megac::frontend
