// Gradient rules of the reductions (axes as a constant input, keepdims,
// noop_with_empty_axes) and CumSum. The output gradient is brought back to
// the kept-dims shape and broadcast over the reduced axes.
//
// Ties: ReduceMax/ReduceMin split the gradient evenly among the elements
// that attain the extremum.
#include "passes/autodiff/Autodiff.h"

#include <optional>

namespace megac::autodiff {

using ir::kNoValue;

namespace {

struct Reduced {
  std::vector<int64_t> axes; // sorted, normalized; empty: nothing is reduced
  Shape keptShape;           // the input's shape with 1 on reduced axes
  int64_t count = 1;         // elements per reduced group
  // Empty axes with noop_with_empty_axes: the op copies its input (the spec's
  // "output equal to input", also for ReduceSumSquare, L1...), so dx = dy.
  bool noop = false;
};

std::optional<Reduced> reducedAxesOrNoop(GradContext &c) {
  const Shape in = c.shape(c.input(0));
  int64_t rank = int64_t(in.size());
  std::vector<bool> reduce(in.size(), false);
  std::vector<int64_t> listed;
  if (ValueId axesV = c.input(1); axesV != kNoValue) {
    const Tensor *t = c.graph().constValue(axesV);
    if (!t) {
      c.unsupported("the reduction axes must be a constant to differentiate " + c.fwd().type);
      return std::nullopt;
    }
    listed = t->toInt64Vector();
  }
  bool noop = listed.empty() && c.attrs().getInt("noop_with_empty_axes", 0);
  if (listed.empty() && !noop) reduce.assign(in.size(), true);
  for (int64_t a : listed) {
    int64_t n = a < 0 ? a + rank : a;
    if (n < 0 || n >= rank) {
      c.unsupported("reduction axis out of range");
      return std::nullopt;
    }
    reduce[size_t(n)] = true;
  }
  Reduced r;
  r.noop = noop;
  r.keptShape = in;
  for (int64_t d = 0; d < rank; ++d)
    if (reduce[size_t(d)]) {
      r.axes.push_back(d);
      r.count *= in[size_t(d)];
      r.keptShape[size_t(d)] = 1;
    }
  return r;
}

// The reduced axes, or nullopt when the rule has nothing left to do: an
// error, or a no-op reduction whose gradient (dy) was added.
std::optional<Reduced> reducedAxes(GradContext &c) {
  auto r = reducedAxesOrNoop(c);
  if (r && r->noop) {
    c.addGrad(0, c.gradOutput(0));
    return std::nullopt;
  }
  return r;
}

// `v` (the output or its gradient) with the reduced axes kept as 1s.
ValueId kept(GradContext &c, ValueId v, const Reduced &r) {
  if (c.shape(v) == r.keptShape) return v;
  return c.op("Reshape", {v, c.int64s(r.keptShape)});
}

ValueId expandToInput(GradContext &c, ValueId v) {
  const Shape in = c.shape(c.input(0));
  if (c.shape(v) == in) return v;
  return c.op("Expand", {v, c.int64s(in)});
}

void reduceSumRule(GradContext &c) {
  auto r = reducedAxes(c);
  if (!r) return;
  c.addGrad(0, expandToInput(c, kept(c, c.gradOutput(0), *r)));
}

void reduceMeanRule(GradContext &c) {
  auto r = reducedAxes(c);
  if (!r) return;
  ValueId dy = kept(c, c.gradOutput(0), *r);
  if (r->count != 1) dy = c.op("Mul", {dy, c.scalar(1.0 / double(r->count), c.dtype(dy))});
  c.addGrad(0, expandToInput(c, dy));
}

void reduceSumSquareRule(GradContext &c) {
  auto r = reducedAxes(c);
  if (!r) return;
  ValueId x = c.input(0), dy = kept(c, c.gradOutput(0), *r);
  c.addGrad(0, c.op("Mul", {c.op("Mul", {x, c.scalar(2, c.dtype(x))}), dy}));
}

// ReduceL1: sign(x) dy.
void reduceL1Rule(GradContext &c) {
  auto r = reducedAxes(c);
  if (!r) return;
  ValueId x = c.input(0), dy = kept(c, c.gradOutput(0), *r);
  c.addGrad(0, c.op("Mul", {c.op("Sign", {x}), dy}));
}

// ReduceL2: x / y dy.
void reduceL2Rule(GradContext &c) {
  auto r = reducedAxes(c);
  if (!r) return;
  ValueId x = c.input(0), dy = kept(c, c.gradOutput(0), *r), y = kept(c, c.output(0), *r);
  c.addGrad(0, c.op("Mul", {x, c.op("Div", {dy, y})}));
}

// ReduceLogSumExp: exp(x - y) dy (the softmax over the reduced axes).
void reduceLogSumExpRule(GradContext &c) {
  auto r = reducedAxes(c);
  if (!r) return;
  ValueId x = c.input(0), dy = kept(c, c.gradOutput(0), *r), y = kept(c, c.output(0), *r);
  c.addGrad(0, c.op("Mul", {c.op("Exp", {c.op("Sub", {x, y})}), dy}));
}

// ReduceLogSum: dy / exp(y) (= dy / sum).
void reduceLogSumRule(GradContext &c) {
  auto r = reducedAxes(c);
  if (!r) return;
  ValueId dy = kept(c, c.gradOutput(0), *r), y = kept(c, c.output(0), *r);
  c.addGrad(0, expandToInput(c, c.op("Div", {dy, c.op("Exp", {y})})));
}

// ReduceMax/ReduceMin: dy / (number of ties) where x equals the result.
void reduceExtremumRule(GradContext &c) {
  auto r = reducedAxes(c);
  if (!r) return;
  ValueId x = c.input(0), dy = kept(c, c.gradOutput(0), *r);
  if (r->axes.empty()) return c.addGrad(0, dy); // a rank-0 input
  ValueId attains = c.op("Equal", {x, kept(c, c.output(0), *r)});
  Attrs toFloat, keep;
  toFloat.set("to", Attr::ofInt(int64_t(c.dtype(x))));
  keep.set("keepdims", Attr::ofInt(1));
  ValueId ties = c.op("ReduceSum", {c.op("Cast", {attains}, toFloat), c.int64s(r->axes)}, keep);
  ValueId share = c.op("Div", {dy, ties});
  c.addGrad(0, c.op("Where", {attains, share, c.scalar(0, c.dtype(x))}));
}

// The adjoint of a running sum is the running sum in the other direction.
void cumSumRule(GradContext &c) {
  Attrs a;
  a.set("exclusive", Attr::ofInt(c.attrs().getInt("exclusive", 0)));
  a.set("reverse", Attr::ofInt(c.attrs().getInt("reverse", 0) ? 0 : 1));
  c.addGrad(0, c.op("CumSum", {c.gradOutput(0), c.input(1)}, a));
}

} // namespace

void registerReductionGrads() {
  registerGradRule("ReduceSum", reduceSumRule);
  registerGradRule("ReduceMean", reduceMeanRule);
  registerGradRule("ReduceSumSquare", reduceSumSquareRule);
  registerGradRule("ReduceL1", reduceL1Rule);
  registerGradRule("ReduceL2", reduceL2Rule);
  registerGradRule("ReduceLogSumExp", reduceLogSumExpRule);
  registerGradRule("ReduceLogSum", reduceLogSumRule);
  registerGradRule("ReduceMax", reduceExtremumRule);
  registerGradRule("ReduceMin", reduceExtremumRule);
  registerGradRule("CumSum", cumSumRule);
}

} // namespace megac::autodiff
