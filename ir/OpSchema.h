#pragma once
// Per-op type inference. Each op family registers an OpSchema per op type;
// inference computes the output types from the input types, the attributes
// and, where an op needs them (Reshape's shape, Slice's starts...), the
// values of constant inputs.
#include "ir/Graph.h"

#include "llvm/ADT/StringRef.h"

#include <functional>

namespace megac::ir {

class InferContext {
public:
  InferContext(Graph &g, int32_t opIndex);

  const Op &op() const { return g_.ops[size_t(opIndex_)]; }
  const Attrs &attrs() const { return op().attrs; }
  size_t numInputs() const { return op().inputs.size(); }
  size_t numOutputs() const { return op().outputs.size(); }
  bool hasInput(size_t i) const { return i < numInputs() && op().inputs[i] != kNoValue; }
  // nullptr when the optional input is omitted.
  const TensorType *inputType(size_t i) const;
  // The value of input i if it is a constant with data, else nullptr.
  const Tensor *inputConst(size_t i) const;
  // Like inputConst, but an error (naming the node) when the value is not
  // known at compile time. `what` describes the input ("shape", "axes").
  llvm::Expected<const Tensor *> requireConst(size_t i, llvm::StringRef what) const;
  void setOutput(size_t i, TensorType t);
  void setOutput(size_t i, DType d, Shape s) { setOutput(i, TensorType{d, std::move(s), false}); }
  TensorType &outputType(size_t i);
  // For ops whose result follows from types alone (Shape, Size): makes output
  // i a constant with this value; the op is then folded away.
  void setOutputValue(size_t i, Tensor t);

  llvm::Error error(const llvm::Twine &msg) const { return opError(g_, op(), msg); }
  Graph &graph() { return g_; }

private:
  Graph &g_;
  int32_t opIndex_;
};

using InferFn = llvm::Error (*)(InferContext &);

struct OpSchema {
  std::string type;
  int minInputs = 0;
  int maxInputs = -1;  // -1: variadic
  int minOutputs = 1;
  int maxOutputs = 1;  // -1: variadic
  InferFn infer = nullptr;
  // Deterministic and side-effect free: evaluated at compile time when all
  // its inputs are constants.
  bool foldable = true;
};

void registerOpSchema(OpSchema s);
const OpSchema *lookupOpSchema(llvm::StringRef type);
std::vector<std::string> registeredOpTypes();

// Helpers shared by families.
// Normalizes a possibly negative axis against rank; error if out of range.
llvm::Expected<int64_t> normalizeAxis(const InferContext &c, int64_t axis, int64_t rank);
// Numpy-style multidirectional broadcasting of shapes.
llvm::Expected<Shape> broadcastShapes(const InferContext &c, const Shape &a, const Shape &b);

// Each family registers its schemas; OpSchema.cpp calls them all once.
void registerElementwiseSchemas();
void registerShapeSchemas();
void registerReductionSchemas();
void registerNNSchemas();
void registerTrainingSchemas();

} // namespace megac::ir
