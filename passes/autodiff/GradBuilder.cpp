#include "passes/autodiff/GradBuilder.h"

#include "ir/OpSchema.h"

namespace megac::autodiff {

using namespace ir;

void GradBuilder::fail(llvm::Error e) {
  if (!err_) err_.emplace(std::move(e));
  else llvm::consumeError(std::move(e));
}

std::vector<ValueId> GradBuilder::opN(const std::string &type, std::vector<ValueId> inputs, size_t numOutputs,
                                      Attrs attrs) {
  if (failed()) return {};
  for (ValueId v : inputs)
    if (v != kNoValue && !g_.type(v).known()) {
      fail(graphError(g_, "autodiff: operand of " + type + " is untyped"));
      return {};
    }
  Op op;
  op.type = type;
  op.name = nameHint + "/" + type;
  op.inputs = std::move(inputs);
  op.attrs = std::move(attrs);
  for (size_t i = 0; i < numOutputs; ++i) {
    Value v;
    v.name = op.name;
    op.outputs.push_back(g_.addValueUnique(std::move(v)));
  }
  std::vector<ValueId> outs = op.outputs;
  int32_t idx = g_.addOp(std::move(op));
  const OpSchema *schema = lookupOpSchema(type);
  if (!schema || !schema->infer) {
    fail(graphError(g_, "autodiff: no type inference for op " + type));
    return {};
  }
  InferContext ctx(g_, idx);
  if (auto e = schema->infer(ctx)) {
    fail(std::move(e));
    return {};
  }
  // Inference may fold a result into a constant (Shape); the op is then dead.
  bool allConst = true;
  for (ValueId o : outs) allConst &= g_.value(o).kind == ValueKind::Const;
  if (allConst) g_.ops[size_t(idx)].dead = true;
  return outs;
}

ValueId GradBuilder::scalar(double v, DType dtype) {
  Tensor t(dtype, {});
  t.setFromDouble(0, v);
  return g_.addConst("c", t);
}

ValueId GradBuilder::int64s(const std::vector<int64_t> &v) {
  return g_.addConst("c", Tensor::fromVector<int64_t>(DType::I64, {int64_t(v.size())}, v));
}

ValueId GradBuilder::sumToShape(ValueId g, const Shape &shape) {
  if (failed() || g == kNoValue) return g;
  if (this->shape(g) == shape) return g;
  Attrs a;
  a.set("shape", Attr::ofInts(shape));
  return op("megac.SumToShape", {g}, a);
}

ValueId GradBuilder::add(ValueId x, ValueId y) {
  if (x == kNoValue) return y;
  if (y == kNoValue) return x;
  return op("Add", {x, y});
}

} // namespace megac::autodiff
