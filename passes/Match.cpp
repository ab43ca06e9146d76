#include "passes/Match.h"

namespace megac::passes {

using namespace ir;

Matcher::Matcher(Graph &g) : g_(g), users_(g.computeUsers()), isOutput_(g.values.size(), false) {
  for (ValueId o : g.outputs) isOutput_[size_t(o)] = true;
}

const Op *Matcher::def(ValueId v) const {
  if (v == kNoValue) return nullptr;
  int32_t p = g_.value(v).producer;
  if (p < 0 || size_t(p) >= g_.ops.size() || g_.ops[size_t(p)].dead) return nullptr;
  return &g_.ops[size_t(p)];
}

const Op *Matcher::defOf(ValueId v, const char *type, size_t numInputs) const {
  const Op *op = def(v);
  if (!op || op->type != type || op->inputs.size() != numInputs || op->outputs.size() != 1) return nullptr;
  for (ValueId in : op->inputs)
    if (in == kNoValue) return nullptr;
  return op;
}

bool Matcher::onlyUsedBy(ValueId v, const Op *user) const {
  if (v == kNoValue || !user || isOutput_[size_t(v)]) return false;
  const auto &u = users_[size_t(v)];
  return u.size() == 1 && &g_.ops[size_t(u[0])] == user;
}

bool Matcher::isNoOp(const Op &op) const {
  if (op.inputs.size() != 1 || op.outputs.size() != 1 || op.inputs[0] == kNoValue) return false;
  if (op.type == "Identity") return true;
  return op.type == "Cast" && g_.type(op.inputs[0]) == g_.type(op.outputs[0]);
}

ValueId Matcher::throughNoOps(ValueId v) const {
  for (const Op *op = def(v); op && isNoOp(*op); op = def(v)) v = op->inputs[0];
  return v;
}

ValueId Matcher::unrepeatedKV(ValueId x) const {
  const Shape &xs = shape(x);
  const Op *reshape = def(throughNoOps(x));
  if (xs.size() != 4 || !reshape || reshape->type != "Reshape") return x;
  ValueId expanded = throughNoOps(reshape->inputs[0]);
  const Shape &es = shape(expanded);
  const Op *expand = def(expanded);
  if (es.size() != 5 || !expand || expand->type != "Expand") return x;
  const int64_t kvHeads = es[1], groups = es[2];
  if (es != Shape{xs[0], kvHeads, groups, xs[2], xs[3]} || kvHeads * groups != xs[1]) return x;
  ValueId one = throughNoOps(expand->inputs[0]);
  const Op *unsqueeze = def(one);
  if (shape(one) != Shape{xs[0], kvHeads, 1, xs[2], xs[3]} || !unsqueeze ||
      (unsqueeze->type != "Unsqueeze" && unsqueeze->type != "Reshape"))
    return x;
  ValueId y = throughNoOps(unsqueeze->inputs[0]);
  if (shape(y) != Shape{xs[0], kvHeads, xs[2], xs[3]}) return x;
  return y;
}

std::optional<double> Matcher::scalarConst(ValueId v) {
  if (v == kNoValue) return std::nullopt;
  const Tensor *t = g_.constValue(v);
  if (!t || t->numel() != 1 || t->dtype() == DType::Bool) return std::nullopt;
  return t->getAsDouble(0);
}

ValueId Matcher::otherOperand(const Op &op, ValueId v) {
  if (op.inputs.size() != 2) return kNoValue;
  if (op.inputs[0] == v) return op.inputs[1];
  if (op.inputs[1] == v) return op.inputs[0];
  return kNoValue;
}

Matcher::Product Matcher::product(ValueId v, int maxDepth) {
  Product p;
  collect(v, nullptr, maxDepth, p);
  return p;
}

// A Mul or Div that is an elementwise product: each operand either has the
// result's type or is a scalar constant that does not broadcast the other.
void Matcher::collect(ValueId v, const Op *user, int depth, Product &p) {
  const Op *op = def(v);
  bool inner = op && depth > 0 && (!user || onlyUsedBy(v, user)) && op->outputs.size() == 1 &&
               op->inputs.size() == 2 && (op->type == "Mul" || op->type == "Div");
  std::optional<double> c[2];
  for (size_t i = 0; inner && i < 2; ++i) {
    ValueId in = op->inputs[i], other = op->inputs[1 - i];
    if (in == kNoValue || other == kNoValue) {
      inner = false;
      break;
    }
    c[i] = scalarConst(in);
    if (c[i] && type(other) != type(v)) c[i].reset();
    if (!c[i] && type(in) != type(v)) inner = false;
  }
  // Only a division by a (non-zero) scalar constant is a product.
  if (inner && op->type == "Div" && (!c[1] || *c[1] == 0)) inner = false;
  if (!inner) {
    p.leaves.push_back(v);
    p.users.push_back(user);
    return;
  }
  if (op->type == "Div") {
    p.scale /= *c[1];
    collect(op->inputs[0], op, depth - 1, p);
    return;
  }
  for (size_t i = 0; i < 2; ++i) {
    if (c[i] && !c[1 - i]) p.scale *= *c[i];
    else collect(op->inputs[i], op, depth - 1, p);
  }
}

void replaceProducer(Graph &g, ValueId result, Op fused) {
  int32_t at = g.value(result).producer;
  Op &old = g.ops[size_t(at)];
  if (fused.name.empty()) fused.name = old.name;
  old = std::move(fused);
  for (ValueId o : old.outputs)
    if (o != kNoValue) g.value(o).producer = at;
}

ValueId shapeConst(Graph &g, const std::string &nameHint, const Shape &s) {
  return g.addConst(nameHint, Tensor::fromVector<int64_t>(DType::I64, {int64_t(s.size())}, s));
}

} // namespace megac::passes
