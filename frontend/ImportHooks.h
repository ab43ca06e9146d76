#pragma once
// Per-op import hooks. The generic importer copies a node's inputs and
// attributes into an IR op of the same type. An op whose ONNX form changed
// across opsets registers a hook that rewrites the node into the form the IR
// uses (the newest opset's: axes as inputs, not attributes, etc.), so that
// kernels and inference see one form only.
#include "ir/Graph.h"

#include "llvm/ADT/StringRef.h"

namespace megac::frontend {

struct NodeImport {
  ir::Graph &graph;
  int64_t opset;                      // the default-domain opset of the model
  std::string type;                   // may be rewritten by the hook
  std::string name;
  std::vector<ir::ValueId> inputs;    // kNoValue for omitted inputs
  std::vector<ir::ValueId> outputs;   // already created, types unknown
  Attrs attrs;

  // Adds a constant input value (e.g. axes moved from an attribute).
  ir::ValueId addConst(const std::string &hint, Tensor t) { return graph.addConst(name + "." + hint, std::move(t)); }
  // Emits a helper op before this node; returns its single output.
  ir::ValueId emitOp(const std::string &opType, std::vector<ir::ValueId> ins, Attrs a = {});
  llvm::Error error(const llvm::Twine &msg) const;
};

using ImportHook = llvm::Error (*)(NodeImport &);

void registerImportHook(llvm::StringRef type, ImportHook hook);
ImportHook lookupImportHook(llvm::StringRef type);

// Helper for hooks: moves an ints attribute into a new i64 constant input at
// position `inputIndex` (appending omitted inputs as needed).
void moveIntsAttrToInput(NodeImport &n, const std::string &attr, size_t inputIndex);

void registerElementwiseImports();
void registerShapeImports();
void registerReductionImports();
void registerNNImports();

} // namespace megac::frontend
