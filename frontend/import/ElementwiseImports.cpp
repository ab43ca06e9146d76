// Import hooks for the elementwise family: rewrites older-opset forms into
// the newest one that the IR, inference and kernels know.
//   - opset < 6: `consumed_inputs` (a legacy memory hint) is dropped.
//   - opset < 7: binary ops' `broadcast` / `axis` (B aligned at `axis` of A)
//     become numpy broadcasting, by giving B trailing 1-dims.
//   - Clip < 11: `min` / `max` attributes become inputs 1 and 2.
//   - Dropout < 12: `ratio` / `is_test` attributes are dropped (inference).
//   - Cast < 6: `to` given as a type name ("FLOAT") becomes the type number.
#include "frontend/ImportHooks.h"

#include "llvm/ADT/StringSwitch.h"

namespace megac::frontend {

namespace {

void dropConsumedInputs(NodeImport &n) { n.attrs.erase("consumed_inputs"); }

// The static shape of value id when the importer already knows it (graph
// inputs and initializers); op results are typed later.
const Shape *knownShape(NodeImport &n, ir::ValueId id) {
  if (id == ir::kNoValue) return nullptr;
  const ir::TensorType &t = n.graph.type(id);
  return t.known() && !t.isSequence ? &t.shape : nullptr;
}

// Legacy (opset < 7) broadcasting: with broadcast=1 and `axis`, B's dims line
// up with A's starting at `axis`; numpy aligns trailing dims, so B is reshaped
// to B.shape + [1] * (rank(A) - axis - rank(B)).
llvm::Error legacyBroadcastToNumpy(NodeImport &n) {
  const bool hasAxis = n.attrs.has("axis");
  const bool broadcast = n.attrs.getInt("broadcast", 0) != 0;
  const int64_t givenAxis = n.attrs.getInt("axis", 0);
  int64_t axis = givenAxis;
  n.attrs.erase("broadcast");
  n.attrs.erase("axis");
  if (!broadcast || !hasAxis || n.inputs.size() < 2) return llvm::Error::success();
  const Shape *a = knownShape(n, n.inputs[0]);
  const Shape *b = knownShape(n, n.inputs[1]);
  if (!a || !b)
    return n.error("legacy broadcasting with 'axis' needs both input shapes at import; only graph inputs and "
                   "initializers have them");
  int64_t rankA = int64_t(a->size()), rankB = int64_t(b->size());
  if (axis < 0) axis += rankA;
  int64_t trailing = rankA - axis - rankB;
  if (axis < 0 || trailing < 0)
    return n.error("broadcast axis " + llvm::Twine(givenAxis) + " does not fit shapes " +
                   shapeToString(*a) + " and " + shapeToString(*b));
  if (trailing == 0) return llvm::Error::success();
  Shape aligned = *b;
  aligned.insert(aligned.end(), size_t(trailing), 1);
  ir::ValueId bId = n.inputs[1];
  if (const Tensor *data = n.graph.constValue(bId)) {
    n.inputs[1] = n.addConst("aligned", data->reshaped(aligned));
    return llvm::Error::success();
  }
  ir::ValueId shape = n.addConst("aligned_shape", Tensor::fromVector<int64_t>(DType::I64, {int64_t(aligned.size())}, aligned));
  n.inputs[1] = n.emitOp("Reshape", {bId, shape});
  return llvm::Error::success();
}

llvm::Error importBinary(NodeImport &n) {
  dropConsumedInputs(n);
  if (n.opset < 7) return legacyBroadcastToNumpy(n);
  return llvm::Error::success();
}

llvm::Error importCommon(NodeImport &n) {
  dropConsumedInputs(n);
  return llvm::Error::success();
}

// A scalar bound of x's element type: made directly when x's type is known,
// else an f32 constant converted by CastLike (folded during specialize).
ir::ValueId boundLike(NodeImport &n, const std::string &hint, float v) {
  ir::ValueId x = n.inputs[0];
  const ir::TensorType &t = n.graph.type(x);
  if (t.known() && !t.isSequence) {
    Tensor c(t.dtype, {});
    c.setFromDouble(0, v);
    return n.addConst(hint, c);
  }
  return n.emitOp("CastLike", {n.addConst(hint, Tensor::scalar(v)), x});
}

llvm::Error importClip(NodeImport &n) {
  dropConsumedInputs(n);
  if (n.opset >= 11) return llvm::Error::success();
  if (n.inputs.empty() || n.inputs[0] == ir::kNoValue) return n.error("Clip needs an input");
  n.inputs.resize(3, ir::kNoValue);
  if (n.attrs.has("min")) n.inputs[1] = boundLike(n, "min", n.attrs.getFloat("min", 0));
  if (n.attrs.has("max")) n.inputs[2] = boundLike(n, "max", n.attrs.getFloat("max", 0));
  n.attrs.erase("min");
  n.attrs.erase("max");
  while (!n.inputs.empty() && n.inputs.back() == ir::kNoValue) n.inputs.pop_back();
  return llvm::Error::success();
}

llvm::Error importDropout(NodeImport &n) {
  dropConsumedInputs(n);
  if (n.opset < 12) {
    n.attrs.erase("ratio");
    n.attrs.erase("is_test");
  }
  return llvm::Error::success();
}

llvm::Error importCast(NodeImport &n) {
  const Attr *to = n.attrs.get("to");
  if (!to || to->kind != Attr::Kind::String) return llvm::Error::success();
  int64_t code = llvm::StringSwitch<int64_t>(llvm::StringRef(to->s).upper())
                     .Case("FLOAT", int64_t(DType::F32))
                     .Case("UINT8", int64_t(DType::U8))
                     .Case("INT8", int64_t(DType::I8))
                     .Case("UINT16", int64_t(DType::U16))
                     .Case("INT16", int64_t(DType::I16))
                     .Case("INT32", int64_t(DType::I32))
                     .Case("INT64", int64_t(DType::I64))
                     .Case("STRING", int64_t(DType::String))
                     .Case("BOOL", int64_t(DType::Bool))
                     .Case("FLOAT16", int64_t(DType::F16))
                     .Case("DOUBLE", int64_t(DType::F64))
                     .Case("UINT32", int64_t(DType::U32))
                     .Case("UINT64", int64_t(DType::U64))
                     .Case("BFLOAT16", int64_t(DType::BF16))
                     .Default(-1);
  if (code < 0) return n.error("Cast 'to' names an unknown type '" + to->s + "'");
  n.attrs.set("to", Attr::ofInt(code));
  return llvm::Error::success();
}

} // namespace

void registerElementwiseImports() {
  for (const char *op : {"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Less", "Greater"})
    registerImportHook(op, importBinary);
  for (const char *op : {"Abs", "Ceil", "Elu", "Exp", "Floor", "HardSigmoid", "LeakyRelu", "Log", "Max", "Mean",
                         "Min", "Neg", "PRelu", "Reciprocal", "Relu", "Selu", "Sigmoid", "Sqrt", "Sum", "Tanh"})
    registerImportHook(op, importCommon);
  registerImportHook("Clip", importClip);
  registerImportHook("Dropout", importDropout);
  registerImportHook("Cast", importCast);
}

} // namespace megac::frontend
