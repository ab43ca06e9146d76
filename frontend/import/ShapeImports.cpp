// Import hooks for the shape family: older opsets kept axes, split, starts,
// pads... as attributes; the IR takes them as inputs (the newest form).
#include "frontend/ImportHooks.h"

namespace megac::frontend {

namespace {

// Squeeze/Unsqueeze < 13: axes attribute -> input 1.
llvm::Error axesToInput(NodeImport &n) {
  if (n.opset < 13) moveIntsAttrToInput(n, "axes", 1);
  return llvm::Error::success();
}

// Split < 13: split attribute -> input 1.
llvm::Error splitToInput(NodeImport &n) {
  if (n.opset < 13) moveIntsAttrToInput(n, "split", 1);
  return llvm::Error::success();
}

// Slice < 10: starts, ends, axes attributes -> inputs 1..3 (no steps).
llvm::Error sliceToInputs(NodeImport &n) {
  if (n.opset >= 10) return llvm::Error::success();
  if (!n.attrs.has("starts") || !n.attrs.has("ends")) return n.error("Slice needs 'starts' and 'ends'");
  moveIntsAttrToInput(n, "starts", 1);
  moveIntsAttrToInput(n, "ends", 2);
  moveIntsAttrToInput(n, "axes", 3);
  return llvm::Error::success();
}

// Pad < 11: pads attribute -> input 1, value attribute (float) -> input 2.
// The kernel converts constant_value to the data's dtype, so an f32 scalar
// serves any data type.
llvm::Error padToInputs(NodeImport &n) {
  if (n.opset >= 11) return llvm::Error::success();
  if (!n.attrs.has("pads")) return n.error("Pad needs 'pads'");
  moveIntsAttrToInput(n, "pads", 1);
  if (n.attrs.has("value")) {
    float v = n.attrs.getFloat("value", 0.0f);
    n.attrs.erase("value");
    n.inputs.resize(std::max<size_t>(n.inputs.size(), 3), ir::kNoValue);
    n.inputs[2] = n.addConst("value", Tensor::scalar(v));
  }
  return llvm::Error::success();
}

// Scatter (opset 9-10) is ScatterElements without a reduction.
llvm::Error scatterToScatterElements(NodeImport &n) {
  n.type = "ScatterElements";
  return llvm::Error::success();
}

} // namespace

void registerShapeImports() {
  registerImportHook("Squeeze", axesToInput);
  registerImportHook("Unsqueeze", axesToInput);
  registerImportHook("Split", splitToInput);
  registerImportHook("Slice", sliceToInputs);
  registerImportHook("Pad", padToInputs);
  registerImportHook("Scatter", scatterToScatterElements);
}

} // namespace megac::frontend
