#pragma once
// Hand-built plan Programs for tests: values and ops added one at a time.
#include "runtime/plan/PlanIO.h"

#include <vector>

namespace megac::testing {

inline plan::TensorType f32(std::vector<int64_t> shape) {
  plan::TensorType t;
  t.set_dtype(plan::F32);
  for (int64_t d : shape) t.add_shape(d);
  return t;
}

// An f32 value of this shape and kind; its id.
inline int32_t addValue(plan::Program &p, std::vector<int64_t> shape,
                        plan::Program::Value::Kind kind = plan::Program::Value::TEMP) {
  plan::Program::Value *v = p.add_values();
  v->set_kind(kind);
  *v->mutable_type() = f32(shape);
  return p.values_size() - 1;
}

inline void addOp(plan::Program &p, const char *type, std::vector<int32_t> in, std::vector<int32_t> out,
                  const Attrs &attrs = {}) {
  plan::Program::Op *op = p.add_ops();
  op->set_type(type);
  for (int32_t i : in) op->add_inputs(i);
  for (int32_t o : out) op->add_outputs(o);
  plan::toProto(attrs, *op->mutable_attributes());
}

inline constexpr auto kArg = plan::Program::Value::ARGUMENT;

} // namespace megac::testing
