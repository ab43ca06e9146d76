#pragma once
// The layer-level IR: typed values with static shapes, ops with attributes,
// and named initializers (parameters or constants). Ops are kept in
// topological order. Values are addressed by index (ValueId); indices are
// stable until compact().
#include "runtime/core/Attrs.h"
#include "runtime/core/Tensor.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace megac::ir {

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

struct TensorType {
  DType dtype = DType::Undefined;
  Shape shape;
  bool isSequence = false; // an ONNX sequence of tensors (folded away early)
  bool known() const { return dtype != DType::Undefined; }
  bool operator==(const TensorType &o) const {
    return dtype == o.dtype && shape == o.shape && isSequence == o.isSequence;
  }
  bool operator!=(const TensorType &o) const { return !(*this == o); }
  std::string str() const; // "f32[2,16,64]", "seq<f32>"
};

enum class ValueKind {
  Input,  // graph input fed at run time (e.g. input_ids)
  Param,  // trainable parameter (an initializer, or a data-less weight input)
  Const,  // constant initializer, folded value or frozen parameter
  Result, // produced by an op
};
const char *valueKindName(ValueKind k);

// Where an initializer's bytes live when they are not loaded.
struct ExternalData {
  std::string location; // as written in the ONNX file, relative to Graph::baseDir
  int64_t offset = 0;
  int64_t length = -1;  // -1: to the end of the file
};

struct Value {
  std::string name;
  TensorType type;
  ValueKind kind = ValueKind::Result;
  std::optional<Tensor> data;           // loaded bytes (Param / Const)
  std::optional<ExternalData> external; // lazily loaded bytes
  bool frozen = false;                  // a Const that was a parameter (user chose --frozen)
  int32_t producer = -1;                // op index, for Result

  bool isInitializer() const { return kind == ValueKind::Param || kind == ValueKind::Const; }
  bool hasData() const { return data.has_value() || external.has_value(); }
};

struct Op {
  std::string type;  // ONNX op type ("MatMul") or a megac op ("megac.SoftmaxCrossEntropy")
  std::string name;  // node name from the source, for errors
  std::vector<ValueId> inputs;  // kNoValue for an omitted optional input
  std::vector<ValueId> outputs;
  Attrs attrs;
  bool dead = false; // removed; dropped by compact()
};

class Graph {
public:
  std::string name = "main";
  std::string baseDir;       // directory of the source model, for external data
  std::string sourcePath;    // the model file this graph came from
  uint64_t sourceModelHash = 0; // runtime/core/ModelHash.h of that file (0: not from ONNX)
  int64_t opset = 0;         // default-domain opset of the source

  std::vector<Value> values;
  std::vector<Op> ops;
  std::vector<ValueId> inputs;  // Input-kind values in order
  std::vector<ValueId> outputs;

  // Adds a value; its name must be unique (an error otherwise).
  llvm::Expected<ValueId> addValue(Value v);
  // Adds a value with a fresh name derived from hint.
  ValueId addValueUnique(Value v);
  ValueId addConst(const std::string &nameHint, Tensor t);
  // Appends an op (at the end of the topological order) and sets its
  // outputs' producer. The outputs must already exist.
  int32_t addOp(Op op);
  // Inserts an op before op index `pos` (shifting later indices).
  int32_t insertOp(size_t pos, Op op);

  ValueId lookup(llvm::StringRef name) const; // kNoValue if absent
  Value &value(ValueId id) { return values[size_t(id)]; }
  const Value &value(ValueId id) const { return values[size_t(id)]; }
  const TensorType &type(ValueId id) const { return values[size_t(id)].type; }

  // The bytes of an initializer, loading external data on first use.
  llvm::Expected<Tensor> tensorOf(ValueId id);
  // The bytes of a Const value if they are available, else nullptr.
  const Tensor *constValue(ValueId id);

  // Replace every use of `from` (op inputs, graph outputs) by `to`.
  void replaceAllUses(ValueId from, ValueId to);
  // ops that use each value (recomputed on demand).
  std::vector<std::vector<int32_t>> computeUsers() const;
  // Drops dead ops and values nothing refers to; renumbers.
  void compact();
  // Recomputes producer indices after ops were reordered.
  void recomputeProducers();

  std::string uniqueName(const std::string &hint);

private:
  llvm::StringMap<ValueId> byName_;
  uint64_t nextUnique_ = 0;
  friend class GraphBuilder;
};

// Error helper: "<file>: node '<name>' (<type>, opset N): <msg>".
llvm::Error opError(const Graph &g, const Op &op, const llvm::Twine &msg);
llvm::Error graphError(const Graph &g, const llvm::Twine &msg);

} // namespace megac::ir
