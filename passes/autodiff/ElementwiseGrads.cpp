// Gradient rules of the elementwise ops (broadcasting arithmetic, unary
// math, activations, selection, casts). Broadcast operands get their
// gradient summed back to their own shape (sumToShape).
//
// Ties: Max/Min (and Clip, which is Min(Max(x, lo), hi)) give the whole
// gradient to the FIRST input that attains the result; the others get none.
#include "passes/autodiff/Autodiff.h"

#include <cmath>

namespace megac::autodiff {

using ir::kNoValue;

namespace {

// Contributes `g` (broadcast to the output's shape) to input i.
// (Shapes are read from the graph only after the operand ops exist: emitting
// an op may reallocate the graph's values and invalidate references.)
void addBroadcastGrad(GradContext &c, size_t i, ValueId g) {
  if (!c.needsGrad(i) || g == kNoValue) return;
  c.addGrad(i, c.sumToShape(g, c.shape(c.input(i))));
}

ValueId zero(GradContext &c, ValueId like) { return c.scalar(0, c.dtype(like)); }

// `v` in dtype `like`'s dtype (for operands such as Pow's exponent that may
// have another numeric type).
ValueId castLike(GradContext &c, ValueId v, ValueId like) {
  if (c.dtype(v) == c.dtype(like)) return v;
  Attrs a;
  a.set("to", Attr::ofInt(int64_t(c.dtype(like))));
  return c.op("Cast", {v}, a);
}

// Where(mask, g, 0) or Where(mask, 0, g).
ValueId select(GradContext &c, ValueId mask, ValueId g, bool whereTrue) {
  ValueId z = zero(c, g);
  return whereTrue ? c.op("Where", {mask, g, z}) : c.op("Where", {mask, z, g});
}

void addRule(GradContext &c) {
  ValueId dy = c.gradOutput(0);
  addBroadcastGrad(c, 0, dy);
  addBroadcastGrad(c, 1, dy);
}

void subRule(GradContext &c) {
  ValueId dy = c.gradOutput(0);
  addBroadcastGrad(c, 0, dy);
  if (c.needsGrad(1)) c.addGrad(1, c.op("Neg", {c.sumToShape(dy, c.shape(c.input(1)))}));
}

void mulRule(GradContext &c) {
  ValueId dy = c.gradOutput(0), a = c.input(0), b = c.input(1);
  if (c.needsGrad(0)) addBroadcastGrad(c, 0, c.op("Mul", {dy, b}));
  if (c.needsGrad(1)) addBroadcastGrad(c, 1, c.op("Mul", {dy, a}));
}

// d(a/b)/da = 1/b; d(a/b)/db = -a/b^2 = -y/b.
void divRule(GradContext &c) {
  ValueId dy = c.gradOutput(0), b = c.input(1), y = c.output(0);
  if (c.needsGrad(0)) addBroadcastGrad(c, 0, c.op("Div", {dy, b}));
  if (c.needsGrad(1)) {
    ValueId g = c.op("Div", {c.op("Mul", {dy, y}), b});
    c.addGrad(1, c.op("Neg", {c.sumToShape(g, c.shape(b))}));
  }
}

// The value of a constant scalar (any numeric dtype), if `v` is one.
std::optional<double> constScalar(GradContext &c, ValueId v) {
  const ir::Value &val = c.graph().value(v);
  if (val.kind != ir::ValueKind::Const || numElements(val.type.shape) != 1) return std::nullopt;
  const Tensor *t = c.graph().constValue(v);
  if (!t) return std::nullopt;
  return t->getAsDouble(0);
}

// y = x^e: dx = dy * e * x^(e-1); de = dy * y * log(x).
void powRule(GradContext &c) {
  ValueId dy = c.gradOutput(0), x = c.input(0), e = c.input(1), y = c.output(0);
  DType dt = c.dtype(x);
  if (c.needsGrad(0)) {
    ValueId g;
    if (auto k = constScalar(c, e)) {
      // A constant exponent: no Pow where x^(e-1) is 1 or x.
      if (*k == 0) g = c.op("Mul", {dy, zero(c, dy)});
      else if (*k == 1) g = dy;
      else if (*k == 2) g = c.op("Mul", {c.op("Mul", {dy, c.scalar(2, dt)}), x});
      else g = c.op("Mul", {c.op("Mul", {dy, c.scalar(*k, dt)}), c.op("Pow", {x, c.scalar(*k - 1, dt)})});
    } else {
      ValueId ef = castLike(c, e, x);
      ValueId xPow = c.op("Pow", {x, c.op("Sub", {ef, c.scalar(1, dt)})});
      g = c.op("Mul", {c.op("Mul", {dy, ef}), xPow});
    }
    addBroadcastGrad(c, 0, g);
  }
  if (c.needsGrad(1)) addBroadcastGrad(c, 1, c.op("Mul", {c.op("Mul", {dy, y}), c.op("Log", {x})}));
}

void negRule(GradContext &c) { c.addGrad(0, c.op("Neg", {c.gradOutput(0)})); }

// Sign(0) = 0: the subgradient at 0 is taken as 0.
void absRule(GradContext &c) { c.addGrad(0, c.op("Mul", {c.gradOutput(0), c.op("Sign", {c.input(0)})})); }

void sqrtRule(GradContext &c) {
  ValueId dy = c.gradOutput(0), y = c.output(0);
  c.addGrad(0, c.op("Div", {c.op("Mul", {dy, c.scalar(0.5, c.dtype(y))}), y}));
}

void reciprocalRule(GradContext &c) {
  ValueId dy = c.gradOutput(0), y = c.output(0);
  c.addGrad(0, c.op("Neg", {c.op("Mul", {dy, c.op("Mul", {y, y})})}));
}

void expRule(GradContext &c) { c.addGrad(0, c.op("Mul", {c.gradOutput(0), c.output(0)})); }

void logRule(GradContext &c) { c.addGrad(0, c.op("Div", {c.gradOutput(0), c.input(0)})); }

void sinRule(GradContext &c) { c.addGrad(0, c.op("Mul", {c.gradOutput(0), c.op("Cos", {c.input(0)})})); }

void cosRule(GradContext &c) {
  c.addGrad(0, c.op("Neg", {c.op("Mul", {c.gradOutput(0), c.op("Sin", {c.input(0)})})}));
}

void tanhRule(GradContext &c) {
  ValueId dy = c.gradOutput(0), y = c.output(0);
  ValueId oneMinusY2 = c.op("Sub", {c.scalar(1, c.dtype(y)), c.op("Mul", {y, y})});
  c.addGrad(0, c.op("Mul", {dy, oneMinusY2}));
}

void sigmoidRule(GradContext &c) {
  ValueId dy = c.gradOutput(0), y = c.output(0);
  ValueId dydx = c.op("Mul", {y, c.op("Sub", {c.scalar(1, c.dtype(y)), y})});
  c.addGrad(0, c.op("Mul", {dy, dydx}));
}

// The subgradient at 0 is 0.
void reluRule(GradContext &c) {
  ValueId x = c.input(0);
  ValueId positive = c.op("Greater", {x, zero(c, x)});
  c.addGrad(0, select(c, positive, c.gradOutput(0), true));
}

// d erf(x)/dx = 2/sqrt(pi) * exp(-x^2).
void erfRule(GradContext &c) {
  ValueId dy = c.gradOutput(0), x = c.input(0);
  ValueId density = c.op("Exp", {c.op("Neg", {c.op("Mul", {x, x})})});
  ValueId scaled = c.op("Mul", {dy, c.scalar(2 / std::sqrt(M_PI), c.dtype(x))});
  c.addGrad(0, c.op("Mul", {scaled, density}));
}

void geluRule(GradContext &c) {
  Attrs a;
  a.set("approximate", Attr::ofString(c.attrs().getString("approximate", "none")));
  c.addGrad(0, c.op("megac.GeluGrad", {c.gradOutput(0), c.input(0)}, a));
}

void whereRule(GradContext &c) {
  ValueId dy = c.gradOutput(0), cond = c.input(0);
  if (c.needsGrad(1)) addBroadcastGrad(c, 1, select(c, cond, dy, true));
  if (c.needsGrad(2)) addBroadcastGrad(c, 2, select(c, cond, dy, false));
}

// Max/Min: each input's share is where it equals the result and no earlier
// input does (ties go to the first).
void extremumRule(GradContext &c) {
  ValueId dy = c.gradOutput(0), y = c.output(0);
  if (c.numInputs() == 1) {
    c.addGrad(0, dy);
    return;
  }
  ValueId taken = kNoValue;
  for (size_t i = 0; i < c.numInputs(); ++i) {
    ValueId attains = c.op("Equal", {c.input(i), y});
    if (c.needsGrad(i)) {
      ValueId mine = taken == kNoValue ? attains : c.op("And", {attains, c.op("Not", {taken})});
      addBroadcastGrad(c, i, select(c, mine, dy, true));
    }
    if (i + 1 < c.numInputs()) taken = taken == kNoValue ? attains : c.op("Or", {taken, attains});
  }
}

void sumRule(GradContext &c) {
  for (size_t i = 0; i < c.numInputs(); ++i) addBroadcastGrad(c, i, c.gradOutput(0));
}

void meanRule(GradContext &c) {
  ValueId dy = c.gradOutput(0);
  ValueId g = c.op("Mul", {dy, c.scalar(1.0 / double(c.numInputs()), c.dtype(dy))});
  for (size_t i = 0; i < c.numInputs(); ++i) addBroadcastGrad(c, i, g);
}

// Identity, Cast, CastLike: the gradient passes through (addGrad casts it
// back to the input's dtype).
void passThroughRule(GradContext &c) { c.addGrad(0, c.gradOutput(0)); }

// Dropout runs as at inference (the identity; the IR refuses training
// mode), so its gradient passes through.
void dropoutRule(GradContext &c) {
  if (ValueId mode = c.input(2); mode != kNoValue) {
    auto training = constScalar(c, mode);
    if (!training || *training != 0) return c.unsupported("Dropout is differentiated at inference only");
  }
  c.addGrad(0, c.gradOutput(0));
}

// Clip(x, lo, hi) = Min(Max(x, lo), hi) (so hi wins when lo > hi): x gets
// the gradient where lo <= x and Max(x, lo) <= hi; lo and hi get the rest.
void clipRule(GradContext &c) {
  ValueId dy = c.gradOutput(0), x = c.input(0), lo = c.input(1), hi = c.input(2);
  ValueId atLeastLo = x;
  ValueId dLower = dy; // the gradient of Max(x, lo)
  if (hi != kNoValue) {
    if (lo != kNoValue) atLeastLo = c.op("Max", {x, lo});
    ValueId belowHi = c.op("LessOrEqual", {atLeastLo, hi});
    dLower = select(c, belowHi, dy, true);
    if (c.needsGrad(2)) addBroadcastGrad(c, 2, select(c, belowHi, dy, false));
  }
  if (lo == kNoValue) return c.addGrad(0, dLower);
  ValueId aboveLo = c.op("GreaterOrEqual", {x, lo});
  if (c.needsGrad(0)) c.addGrad(0, select(c, aboveLo, dLower, true));
  if (c.needsGrad(1)) addBroadcastGrad(c, 1, select(c, aboveLo, dLower, false));
}

} // namespace

void registerElementwiseGrads() {
  registerGradRule("Add", addRule);
  registerGradRule("Sub", subRule);
  registerGradRule("Mul", mulRule);
  registerGradRule("Div", divRule);
  registerGradRule("Pow", powRule);
  registerGradRule("Neg", negRule);
  registerGradRule("Abs", absRule);
  registerGradRule("Sqrt", sqrtRule);
  registerGradRule("Reciprocal", reciprocalRule);
  registerGradRule("Exp", expRule);
  registerGradRule("Log", logRule);
  registerGradRule("Sin", sinRule);
  registerGradRule("Cos", cosRule);
  registerGradRule("Tanh", tanhRule);
  registerGradRule("Sigmoid", sigmoidRule);
  registerGradRule("Relu", reluRule);
  registerGradRule("Erf", erfRule);
  registerGradRule("Gelu", geluRule);
  registerGradRule("Where", whereRule);
  registerGradRule("Max", extremumRule);
  registerGradRule("Min", extremumRule);
  registerGradRule("Sum", sumRule);
  registerGradRule("Mean", meanRule);
  registerGradRule("Identity", passThroughRule);
  registerGradRule("Cast", passThroughRule);
  registerGradRule("CastLike", passThroughRule);
  registerGradRule("Dropout", dropoutRule);
  registerGradRule("Clip", clipRule);
}

} // namespace megac::autodiff
