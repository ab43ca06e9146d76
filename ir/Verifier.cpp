// Checks the IR's invariants (see Verifier.h). Stops at the first violation;
// the message names the offending op (opError) or value.
#include "ir/Verifier.h"

#include "ir/OpSchema.h"

#include "llvm/ADT/StringMap.h"

namespace megac::ir {
namespace {

class Verifier {
public:
  explicit Verifier(const Graph &g) : g_(g), producer_(g.values.size(), -1) {}

  llvm::Error run() {
    if (auto e = checkNames()) return e;
    if (auto e = checkInputs()) return e;
    if (auto e = checkValues()) return e;
    for (const Op &op : g_.ops)
      if (op.dead) return opError(g_, op, "dead op left in the graph (run dce, or Graph::compact)");
    if (auto e = findProducers()) return e;
    for (size_t i = 0; i < g_.ops.size(); ++i)
      if (auto e = checkOp(int32_t(i))) return e;
    return checkOutputs();
  }

private:
  bool validId(ValueId id) const { return id >= 0 && size_t(id) < g_.values.size(); }
  std::string nameOf(ValueId id) const { return "'" + g_.value(id).name + "'"; }
  llvm::Error valueError(ValueId id, const llvm::Twine &msg) const {
    return graphError(g_, "value " + nameOf(id) + " " + msg);
  }
  std::string opLabel(int32_t i) const {
    const Op &op = g_.ops[size_t(i)];
    return "'" + op.name + "' (" + op.type + ", op #" + std::to_string(i) + ")";
  }

  llvm::Error checkNames() const {
    llvm::StringMap<ValueId> seen;
    for (size_t i = 0; i < g_.values.size(); ++i) {
      auto [it, fresh] = seen.try_emplace(g_.values[i].name, ValueId(i));
      if (!fresh)
        return graphError(g_, "two values are named '" + g_.values[i].name + "' (ids " + llvm::Twine(it->second) +
                                  " and " + llvm::Twine(i) + ")");
    }
    return llvm::Error::success();
  }

  llvm::Error checkInputs() {
    std::vector<bool> listed(g_.values.size(), false);
    for (size_t k = 0; k < g_.inputs.size(); ++k) {
      ValueId id = g_.inputs[k];
      if (!validId(id)) return graphError(g_, "graph input #" + llvm::Twine(k) + " refers to no value (id " + llvm::Twine(id) + ")");
      if (g_.value(id).kind != ValueKind::Input)
        return valueError(id, "is listed as graph input #" + llvm::Twine(k) + " but is a " +
                                  valueKindName(g_.value(id).kind) + ", not an input");
      if (listed[size_t(id)]) return valueError(id, "is listed twice among the graph inputs");
      listed[size_t(id)] = true;
    }
    for (size_t i = 0; i < g_.values.size(); ++i)
      if (g_.values[i].kind == ValueKind::Input && !listed[i])
        return valueError(ValueId(i), "is an input but is not listed among the graph inputs");
    return llvm::Error::success();
  }

  llvm::Error checkValues() const {
    for (size_t i = 0; i < g_.values.size(); ++i) {
      const Value &v = g_.values[i];
      ValueId id = ValueId(i);
      if (v.kind == ValueKind::Result) continue; // checked where they are produced and used
      if (!v.type.known()) return valueError(id, "(" + std::string(valueKindName(v.kind)) + ") has no type");
      if (v.kind == ValueKind::Input) {
        if (v.hasData()) return valueError(id, "is a run-time input but carries data");
        continue;
      }
      if (v.type.isSequence) return valueError(id, "is an initializer of sequence type " + v.type.str());
      if (v.data) {
        TensorType actual{v.data->dtype(), v.data->shape(), false};
        if (actual != v.type)
          return valueError(id, "is declared " + v.type.str() + " but its data is " + actual.str());
        if (v.data->numel() > 0 && !v.data->raw()) return valueError(id, "has a data tensor without storage");
      } else if (v.external && v.external->length >= 0) {
        int64_t want = numElements(v.type.shape) * int64_t(dtypeSize(v.type.dtype));
        if (v.external->length != want)
          return valueError(id, "is declared " + v.type.str() + " (" + llvm::Twine(want) +
                                    " bytes) but its external data has length " + llvm::Twine(v.external->length));
      }
    }
    return llvm::Error::success();
  }

  // Each result has exactly one producer, recorded in Value::producer.
  llvm::Error findProducers() {
    for (size_t i = 0; i < g_.ops.size(); ++i) {
      const Op &op = g_.ops[i];
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        ValueId o = op.outputs[k];
        if (o == kNoValue) continue;
        if (!validId(o))
          return opError(g_, op, "output " + llvm::Twine(k) + " refers to no value (id " + llvm::Twine(o) + ")");
        if (g_.value(o).kind != ValueKind::Result)
          return opError(g_, op, "output " + llvm::Twine(k) + " (" + nameOf(o) + ") is a " +
                                     valueKindName(g_.value(o).kind) + ", not an op result");
        if (producer_[size_t(o)] >= 0)
          return opError(g_, op, "output " + llvm::Twine(k) + " (" + nameOf(o) + ") is already produced by op " +
                                     opLabel(producer_[size_t(o)]));
        producer_[size_t(o)] = int32_t(i);
      }
    }
    return llvm::Error::success();
  }

  llvm::Error checkOp(int32_t index) const {
    const Op &op = g_.ops[size_t(index)];
    const OpSchema *schema = lookupOpSchema(op.type);
    if (!schema) return opError(g_, op, "unknown op type '" + op.type + "'");
    if (auto e = checkArity(op, "inputs", op.inputs.size(), schema->minInputs, schema->maxInputs)) return e;
    if (auto e = checkArity(op, "outputs", op.outputs.size(), schema->minOutputs, schema->maxOutputs)) return e;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      ValueId in = op.inputs[k];
      if (in == kNoValue) {
        if (int(k) < schema->minInputs) return opError(g_, op, "required input " + llvm::Twine(k) + " is omitted");
        continue;
      }
      if (!validId(in)) return opError(g_, op, "input " + llvm::Twine(k) + " refers to no value (id " + llvm::Twine(in) + ")");
      const Value &v = g_.value(in);
      if (v.kind == ValueKind::Result) {
        int32_t p = producer_[size_t(in)];
        if (p < 0) return opError(g_, op, "input " + llvm::Twine(k) + " (" + nameOf(in) + ") is not produced by any op");
        if (p >= index)
          return opError(g_, op, "input " + llvm::Twine(k) + " (" + nameOf(in) + ") is used before it is defined (by op " +
                                     opLabel(p) + "): ops are not in topological order");
      }
      if (!v.type.known()) return opError(g_, op, "input " + llvm::Twine(k) + " (" + nameOf(in) + ") has no type");
    }
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      ValueId o = op.outputs[k];
      if (o == kNoValue) continue;
      const Value &v = g_.value(o);
      if (v.producer != index)
        return opError(g_, op, "output " + llvm::Twine(k) + " (" + nameOf(o) + ") records producer #" +
                                   llvm::Twine(v.producer) + ", not this op #" + llvm::Twine(index) +
                                   " (Graph::recomputeProducers after reordering ops)");
      if (!v.type.known()) return opError(g_, op, "output " + llvm::Twine(k) + " (" + nameOf(o) + ") has no type");
    }
    return llvm::Error::success();
  }

  llvm::Error checkArity(const Op &op, const char *what, size_t n, int lo, int hi) const {
    if (int64_t(n) >= lo && (hi < 0 || int64_t(n) <= hi)) return llvm::Error::success();
    std::string range = hi < 0 ? "at least " + std::to_string(lo)
                        : lo == hi ? std::to_string(lo)
                                   : std::to_string(lo) + " to " + std::to_string(hi);
    return opError(g_, op, "has " + llvm::Twine(n) + " " + what + ", expected " + range);
  }

  llvm::Error checkOutputs() const {
    for (size_t k = 0; k < g_.outputs.size(); ++k) {
      ValueId o = g_.outputs[k];
      if (!validId(o)) return graphError(g_, "graph output #" + llvm::Twine(k) + " refers to no value (id " + llvm::Twine(o) + ")");
      const Value &v = g_.value(o);
      if (v.kind == ValueKind::Result && producer_[size_t(o)] < 0)
        return valueError(o, "is a graph output but no op produces it");
      if (!v.type.known()) return valueError(o, "is a graph output but has no type");
    }
    return llvm::Error::success();
  }

  const Graph &g_;
  std::vector<int32_t> producer_; // the op producing each value, -1 if none
};

} // namespace

llvm::Error verifyGraph(const Graph &g) { return Verifier(g).run(); }

} // namespace megac::ir
