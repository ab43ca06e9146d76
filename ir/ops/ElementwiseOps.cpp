// Type inference for the elementwise family (newest-opset forms; older forms
// are rewritten by frontend/import/ElementwiseImports.cpp): unary math and
// activations, binary/variadic arithmetic with numpy broadcasting,
// comparisons and logic, Where, Cast/CastLike, Clip, Identity and Dropout.
#include "ir/OpSchema.h"
#include "runtime/cpu/ElementwiseKernels.h"

#include "llvm/ADT/StringMap.h"

namespace megac::ir {

namespace {

// Element types an op accepts.
enum class Types { Float, Signed, Numeric, UnsignedInt, Bool, NumericOrBool, Any };

bool allows(Types ts, DType t) {
  bool isBool = t == DType::Bool;
  switch (ts) {
  case Types::Float: return isFloatType(t);
  case Types::Signed: return isFloatType(t) || (isIntegerType(t) && isSignedType(t));
  case Types::Numeric: return isFloatType(t) || isIntegerType(t);
  case Types::UnsignedInt: return isIntegerType(t) && !isSignedType(t);
  case Types::Bool: return isBool;
  case Types::NumericOrBool: return isFloatType(t) || isIntegerType(t) || isBool;
  case Types::Any: return t != DType::Undefined;
  }
  return false;
}

const char *describe(Types ts) {
  switch (ts) {
  case Types::Float: return "a floating-point tensor";
  case Types::Signed: return "a floating-point or signed integer tensor";
  case Types::Numeric: return "a numeric tensor";
  case Types::UnsignedInt: return "an unsigned integer tensor";
  case Types::Bool: return "a bool tensor";
  case Types::NumericOrBool: return "a numeric or bool tensor";
  case Types::Any: return "a tensor";
  }
  return "a tensor";
}

// Input i, which must be present, a tensor, and of an accepted type.
llvm::Expected<const TensorType *> typedInput(InferContext &c, size_t i, Types ts) {
  const TensorType *t = c.inputType(i);
  if (!t) return c.error("input " + llvm::Twine(i) + " is required");
  if (t->isSequence) return c.error("input " + llvm::Twine(i) + " is a sequence; this op takes a tensor");
  if (!allows(ts, t->dtype))
    return c.error("input " + llvm::Twine(i) + " is " + dtypeName(t->dtype) + "; " + c.op().type + " takes " +
                   describe(ts));
  return t;
}

llvm::Error requireSameDType(InferContext &c, const TensorType &a, const TensorType &b, size_t ib) {
  if (a.dtype == b.dtype) return llvm::Error::success();
  return c.error("input " + llvm::Twine(ib) + " is " + dtypeName(b.dtype) + " but input 0 is " + dtypeName(a.dtype) +
                 "; the inputs must have the same element type");
}

// ---- Unary ops: y has x's type ----

const llvm::StringMap<Types> &unaryOps() {
  static const llvm::StringMap<Types> ops = {
      {"Sqrt", Types::Float},        {"Reciprocal", Types::Float},    {"Exp", Types::Float},
      {"Log", Types::Float},         {"Cos", Types::Float},           {"Sin", Types::Float},
      {"Tan", Types::Float},         {"Tanh", Types::Float},          {"Acos", Types::Float},
      {"Asin", Types::Float},        {"Atan", Types::Float},          {"Acosh", Types::Float},
      {"Asinh", Types::Float},       {"Atanh", Types::Float},         {"Cosh", Types::Float},
      {"Sinh", Types::Float},        {"Erf", Types::Float},           {"Floor", Types::Float},
      {"Ceil", Types::Float},        {"Round", Types::Float},         {"Softsign", Types::Float},
      {"HardSwish", Types::Float},   {"Sigmoid", Types::Float},       {"Softplus", Types::Float},
      {"Mish", Types::Float},        {"Gelu", Types::Float},          {"Elu", Types::Float},
      {"Celu", Types::Float},        {"Selu", Types::Float},          {"LeakyRelu", Types::Float},
      {"ThresholdedRelu", Types::Float}, {"HardSigmoid", Types::Float}, {"Neg", Types::Signed},
      {"Relu", Types::Signed},       {"Abs", Types::Numeric},         {"Sign", Types::Numeric},
      {"Shrink", Types::Numeric},    {"Not", Types::Bool},
  };
  return ops;
}

llvm::Error inferUnary(InferContext &c) {
  auto x = typedInput(c, 0, unaryOps().lookup(c.op().type));
  if (!x) return x.takeError();
  if (c.op().type == "Gelu") {
    std::string approx = c.attrs().getString("approximate", "none");
    if (approx != "none" && approx != "tanh")
      return c.error("approximate must be \"none\" or \"tanh\", got \"" + approx + "\"");
  }
  c.setOutput(0, (*x)->dtype, (*x)->shape);
  return llvm::Error::success();
}

// IsNaN, IsInf: bool of x's shape.
llvm::Error inferFloatPredicate(InferContext &c) {
  auto x = typedInput(c, 0, Types::Float);
  if (!x) return x.takeError();
  c.setOutput(0, DType::Bool, (*x)->shape);
  return llvm::Error::success();
}

// ---- Binary ops with broadcasting ----

struct BinaryRule {
  Types types;
  bool boolResult;
};

const llvm::StringMap<BinaryRule> &binaryOps() {
  static const llvm::StringMap<BinaryRule> ops = {
      {"Add", {Types::Numeric, false}},         {"Sub", {Types::Numeric, false}},
      {"Mul", {Types::Numeric, false}},         {"Div", {Types::Numeric, false}},
      {"Mod", {Types::Numeric, false}},         {"Equal", {Types::NumericOrBool, true}},
      {"Less", {Types::Numeric, true}},         {"LessOrEqual", {Types::Numeric, true}},
      {"Greater", {Types::Numeric, true}},      {"GreaterOrEqual", {Types::Numeric, true}},
      {"And", {Types::Bool, false}},            {"Or", {Types::Bool, false}},
      {"Xor", {Types::Bool, false}},            {"BitShift", {Types::UnsignedInt, false}},
      {"PRelu", {Types::Numeric, false}},
  };
  return ops;
}

llvm::Error inferBinary(InferContext &c) {
  BinaryRule rule = binaryOps().lookup(c.op().type);
  auto a = typedInput(c, 0, rule.types);
  if (!a) return a.takeError();
  auto b = typedInput(c, 1, rule.types);
  if (!b) return b.takeError();
  if (auto e = requireSameDType(c, **a, **b, 1)) return e;
  if (c.op().type == "BitShift") {
    std::string dir = c.attrs().getString("direction", "");
    if (dir != "LEFT" && dir != "RIGHT") return c.error("direction must be \"LEFT\" or \"RIGHT\", got \"" + dir + "\"");
  }
  auto shape = broadcastShapes(c, (*a)->shape, (*b)->shape);
  if (!shape) return shape.takeError();
  if (c.op().type == "PRelu" && *shape != (*a)->shape)
    return c.error("slope of shape " + shapeToString((*b)->shape) + " does not broadcast to X's shape " +
                   shapeToString((*a)->shape));
  c.setOutput(0, rule.boolResult ? DType::Bool : (*a)->dtype, *shape);
  return llvm::Error::success();
}

// Pow: base and exponent may differ in type; the result has the base's.
llvm::Error inferPow(InferContext &c) {
  auto a = typedInput(c, 0, Types::Numeric);
  if (!a) return a.takeError();
  auto b = typedInput(c, 1, Types::Numeric);
  if (!b) return b.takeError();
  auto shape = broadcastShapes(c, (*a)->shape, (*b)->shape);
  if (!shape) return shape.takeError();
  c.setOutput(0, (*a)->dtype, *shape);
  return llvm::Error::success();
}

// Max, Min, Sum, Mean: one or more inputs of one type, all broadcast together.
llvm::Error inferVariadic(InferContext &c) {
  Types ts = c.op().type == "Mean" ? Types::Float : Types::Numeric;
  if (c.numInputs() == 0) return c.error("needs at least one input");
  auto first = typedInput(c, 0, ts);
  if (!first) return first.takeError();
  Shape shape = (*first)->shape;
  for (size_t i = 1; i < c.numInputs(); ++i) {
    auto t = typedInput(c, i, ts);
    if (!t) return t.takeError();
    if (auto e = requireSameDType(c, **first, **t, i)) return e;
    auto s = broadcastShapes(c, shape, (*t)->shape);
    if (!s) return s.takeError();
    shape = *s;
  }
  c.setOutput(0, (*first)->dtype, shape);
  return llvm::Error::success();
}

// ---- Where, Clip, Cast, CastLike, Identity, Dropout ----

llvm::Error inferWhere(InferContext &c) {
  auto cond = typedInput(c, 0, Types::Bool);
  if (!cond) return cond.takeError();
  auto x = typedInput(c, 1, Types::NumericOrBool);
  if (!x) return x.takeError();
  auto y = typedInput(c, 2, Types::NumericOrBool);
  if (!y) return y.takeError();
  if ((*x)->dtype != (*y)->dtype)
    return c.error(llvm::Twine("X is ") + dtypeName((*x)->dtype) + " but Y is " + dtypeName((*y)->dtype) +
                   "; they must have the same element type");
  auto s = broadcastShapes(c, (*cond)->shape, (*x)->shape);
  if (!s) return s.takeError();
  auto shape = broadcastShapes(c, *s, (*y)->shape);
  if (!shape) return shape.takeError();
  c.setOutput(0, (*x)->dtype, *shape);
  return llvm::Error::success();
}

llvm::Error inferClip(InferContext &c) {
  auto x = typedInput(c, 0, Types::Numeric);
  if (!x) return x.takeError();
  for (size_t i = 1; i < 3 && i < c.numInputs(); ++i) {
    const TensorType *bound = c.inputType(i);
    if (!bound) continue;
    const char *what = i == 1 ? "min" : "max";
    if (bound->dtype != (*x)->dtype)
      return c.error(llvm::Twine(what) + " is " + dtypeName(bound->dtype) + " but the input is " +
                     dtypeName((*x)->dtype));
    if (numElements(bound->shape) != 1)
      return c.error(llvm::Twine(what) + " must be a scalar, got shape " + shapeToString(bound->shape));
  }
  c.setOutput(0, (*x)->dtype, (*x)->shape);
  return llvm::Error::success();
}

llvm::Error checkCastable(InferContext &c, DType t, const llvm::Twine &what) {
  if (t == DType::String) return c.error(what + " is a string type; megac does not support string tensors");
  if (dtypeSize(t) == 0) return c.error(what + " is element type " + llvm::Twine(int(t)) + ", which megac does not support");
  return llvm::Error::success();
}

// Cast / CastLike of x to `to`; a constant x is converted right away.
llvm::Error setCastResult(InferContext &c, const TensorType &x, DType to) {
  if (const Tensor *v = c.inputConst(0)) {
    auto r = cpu::castTensor(*v, to);
    if (!r) return c.error(llvm::toString(r.takeError()));
    c.setOutputValue(0, *r);
    return llvm::Error::success();
  }
  c.setOutput(0, to, x.shape);
  return llvm::Error::success();
}

llvm::Error inferCast(InferContext &c) {
  auto x = typedInput(c, 0, Types::Any);
  if (!x) return x.takeError();
  if (!c.attrs().has("to")) return c.error("the 'to' attribute is required");
  DType to = DType(c.attrs().getInt("to", 0));
  if (auto e = checkCastable(c, (*x)->dtype, "the input")) return e;
  if (auto e = checkCastable(c, to, "the target type ('to')")) return e;
  return setCastResult(c, **x, to);
}

llvm::Error inferCastLike(InferContext &c) {
  auto x = typedInput(c, 0, Types::Any);
  if (!x) return x.takeError();
  auto like = typedInput(c, 1, Types::Any);
  if (!like) return like.takeError();
  if (auto e = checkCastable(c, (*x)->dtype, "the input")) return e;
  if (auto e = checkCastable(c, (*like)->dtype, "target_type")) return e;
  return setCastResult(c, **x, (*like)->dtype);
}

llvm::Error inferIdentity(InferContext &c) {
  const TensorType *x = c.inputType(0);
  if (!x) return c.error("input 0 is required");
  c.setOutput(0, *x);
  return llvm::Error::success();
}

llvm::Error inferDropout(InferContext &c) {
  auto x = typedInput(c, 0, Types::Any);
  if (!x) return x.takeError();
  if (const Tensor *training = c.inputConst(2)) {
    const Tensor *ratio = c.inputConst(1);
    double r = ratio && ratio->numel() == 1 ? ratio->getAsDouble(0) : 0.5;
    if (training->numel() == 1 && training->getAsDouble(0) != 0 && r != 0)
      return c.error("training_mode is true; megac runs Dropout for inference only");
  }
  c.setOutput(0, (*x)->dtype, (*x)->shape);
  c.setOutput(1, DType::Bool, (*x)->shape);
  return llvm::Error::success();
}

} // namespace

void registerElementwiseSchemas() {
  for (const auto &e : unaryOps()) registerOpSchema(OpSchema{e.first().str(), 1, 1, 1, 1, inferUnary, true});
  for (const char *op : {"IsNaN", "IsInf"}) registerOpSchema(OpSchema{op, 1, 1, 1, 1, inferFloatPredicate, true});
  for (const auto &e : binaryOps()) registerOpSchema(OpSchema{e.first().str(), 2, 2, 1, 1, inferBinary, true});
  registerOpSchema(OpSchema{"Pow", 2, 2, 1, 1, inferPow, true});
  for (const char *op : {"Max", "Min", "Sum", "Mean"}) registerOpSchema(OpSchema{op, 1, -1, 1, 1, inferVariadic, true});
  registerOpSchema(OpSchema{"Where", 3, 3, 1, 1, inferWhere, true});
  registerOpSchema(OpSchema{"Clip", 1, 3, 1, 1, inferClip, true});
  registerOpSchema(OpSchema{"Cast", 1, 1, 1, 1, inferCast, true});
  registerOpSchema(OpSchema{"CastLike", 2, 2, 1, 1, inferCastLike, true});
  registerOpSchema(OpSchema{"Identity", 1, 1, 1, 1, inferIdentity, true});
  registerOpSchema(OpSchema{"Dropout", 1, 3, 1, 2, inferDropout, true});
}

} // namespace megac::ir
