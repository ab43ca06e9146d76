// Reduce* ops took `axes` as an attribute before opset 18 (ReduceSum: 13);
// the IR takes it as input 1, as the newest opsets do.
#include "frontend/ImportHooks.h"

namespace megac::frontend {

namespace {

llvm::Error importReduceAxes(NodeImport &n) {
  if (!n.attrs.has("axes")) return llvm::Error::success();
  if (n.inputs.size() > 1 && n.inputs[1] != ir::kNoValue)
    return n.error("has both an 'axes' attribute and an axes input");
  moveIntsAttrToInput(n, "axes", 1);
  return llvm::Error::success();
}

} // namespace

void registerReductionImports() {
  for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
                         "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"})
    registerImportHook(op, importReduceAxes);
}

} // namespace megac::frontend
