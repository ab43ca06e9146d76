#include "frontend/ImportHooks.h"

#include "llvm/ADT/StringMap.h"

#include <mutex>

namespace megac::frontend {

static llvm::StringMap<ImportHook> &table() {
  static llvm::StringMap<ImportHook> t;
  return t;
}

void registerImportHook(llvm::StringRef type, ImportHook hook) { table()[type] = hook; }

ImportHook lookupImportHook(llvm::StringRef type) {
  static std::once_flag once;
  std::call_once(once, [] {
    registerElementwiseImports();
    registerShapeImports();
    registerReductionImports();
    registerNNImports();
  });
  auto it = table().find(type);
  return it == table().end() ? nullptr : it->second;
}

ir::ValueId NodeImport::emitOp(const std::string &opType, std::vector<ir::ValueId> ins, Attrs a) {
  ir::Value v;
  v.name = name + "." + opType;
  ir::ValueId out = graph.addValueUnique(std::move(v));
  ir::Op op;
  op.type = opType;
  op.name = name + "." + opType;
  op.inputs = std::move(ins);
  op.outputs = {out};
  op.attrs = std::move(a);
  graph.addOp(std::move(op));
  return out;
}

llvm::Error NodeImport::error(const llvm::Twine &msg) const {
  ir::Op op;
  op.type = type;
  op.name = name;
  return ir::opError(graph, op, msg);
}

void moveIntsAttrToInput(NodeImport &n, const std::string &attr, size_t inputIndex) {
  const Attr *a = n.attrs.get(attr);
  if (!a) return;
  std::vector<int64_t> v = a->kind == Attr::Kind::Ints ? a->ints : std::vector<int64_t>{a->i};
  n.attrs.erase(attr);
  ir::ValueId c = n.addConst(attr, Tensor::fromVector<int64_t>(DType::I64, {int64_t(v.size())}, v));
  if (n.inputs.size() <= inputIndex) n.inputs.resize(inputIndex + 1, ir::kNoValue);
  n.inputs[inputIndex] = c;
}

} // namespace megac::frontend
