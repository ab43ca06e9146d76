#pragma once
// Checks a gradient rule against central finite differences in float64:
// builds `y = op(inputs)`, seeds dy with a fixed random tensor R, and compares
// the rule's d<R, y>/d input with (f(x + h) - f(x - h)) / 2h element by element.
#include "ir/Eval.h"
#include "ir/OpSchema.h"
#include "passes/autodiff/Autodiff.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace megac::testing {

inline Tensor randomTensor(DType dt, Shape shape, uint32_t seed, double lo = -1, double hi = 1) {
  Tensor t(dt, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.setFromDouble(i, u(rng));
  return t;
}

struct GradCheckInput {
  Tensor value;
  bool differentiate = true; // false: a constant operand (indices, shapes, axes)
  bool constant = false;     // true: fold into the graph as a Const (for shape/axes inputs)
};

// y = opType(inputs) as a graph, types inferred: operands named x<i>, fed
// at run time (`feeds`) unless marked constant. `op` is -1 after a failure
// (reported to gtest).
struct SingleOpGraph {
  ir::Graph g;
  std::vector<ir::ValueId> ins, wrt;
  std::map<std::string, Tensor> feeds;
  int32_t op = -1;
};

inline SingleOpGraph singleOpGraph(const std::string &opType, const std::vector<GradCheckInput> &inputs,
                                   const Attrs &attrs, size_t numOutputs) {
  using namespace ir;
  SingleOpGraph s;
  s.g.opset = 23;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor &t = inputs[i].value;
    if (!t.defined()) {
      s.ins.push_back(kNoValue);
      continue;
    }
    Value v;
    v.name = "x" + std::to_string(i);
    v.type = {t.dtype(), t.shape(), false};
    v.kind = inputs[i].constant ? ValueKind::Const : ValueKind::Input;
    if (inputs[i].constant) v.data = t;
    ValueId id = s.g.addValueUnique(std::move(v));
    if (!inputs[i].constant) {
      s.g.inputs.push_back(id);
      s.feeds[s.g.value(id).name] = t;
    }
    s.ins.push_back(id);
    if (inputs[i].differentiate) s.wrt.push_back(id);
  }
  Op op;
  op.type = opType;
  op.name = "op";
  op.inputs = s.ins;
  op.attrs = attrs;
  for (size_t k = 0; k < numOutputs; ++k) {
    Value v;
    v.name = "y" + std::to_string(k);
    op.outputs.push_back(s.g.addValueUnique(std::move(v)));
  }
  int32_t idx = s.g.addOp(op);
  InferContext ctx(s.g, idx);
  if (auto e = lookupOpSchema(opType)->infer(ctx)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return s;
  }
  s.op = idx;
  return s;
}

// Runs the gradients of sum_k <seeds[k], y_k> with respect to the
// differentiated operands; an undefined seed leaves y_k without gradient.
// Empty (after a gtest failure) on error.
inline std::vector<Tensor> seededGrads(SingleOpGraph &s, const std::vector<Tensor> &seeds) {
  using namespace ir;
  std::vector<ValueId> outs, seedIds;
  for (size_t k = 0; k < seeds.size(); ++k) {
    if (!seeds[k].defined()) continue;
    outs.push_back(s.g.ops[size_t(s.op)].outputs[k]);
    seedIds.push_back(s.g.addConst("seed", seeds[k]));
  }
  auto r = autodiff::differentiate(s.g, outs, seedIds, s.wrt);
  if (!r) {
    ADD_FAILURE() << llvm::toString(r.takeError());
    return {};
  }
  s.g.outputs.clear();
  for (ValueId gv : r->grads) {
    if (gv == kNoValue) {
      ADD_FAILURE() << s.g.ops[size_t(s.op)].type << ": no gradient produced";
      return {};
    }
    s.g.outputs.push_back(gv);
  }
  auto vals = runGraph(s.g, s.feeds);
  if (!vals) {
    ADD_FAILURE() << llvm::toString(vals.takeError());
    return {};
  }
  return *vals;
}

// Returns the worst relative error over all checked inputs; details go to
// the gtest log. `outputIndex` picks which output is seeded (others get none).
inline double gradCheck(const std::string &opType, const std::vector<GradCheckInput> &inputs, Attrs attrs = {},
                        size_t numOutputs = 1, size_t outputIndex = 0, double h = 1e-6) {
  using namespace ir;
  auto feeds = [&](const Graph &g, const std::vector<Tensor> &vals) {
    std::map<std::string, Tensor> f;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].value.defined() && !inputs[i].constant) f["x" + std::to_string(i)] = vals[i];
    return f;
  };
  std::vector<Tensor> vals;
  for (auto &in : inputs) vals.push_back(in.value.defined() ? in.value.clone() : Tensor());

  // Analytic gradients.
  SingleOpGraph a = singleOpGraph(opType, inputs, attrs, numOutputs);
  if (a.op < 0) return INFINITY;
  ValueId y = a.g.ops[size_t(a.op)].outputs[outputIndex];
  Tensor R = randomTensor(a.g.type(y).dtype, a.g.type(y).shape, 1234);
  std::vector<Tensor> seeds(numOutputs);
  seeds[outputIndex] = R;
  std::vector<Tensor> analytic = seededGrads(a, seeds);
  if (analytic.empty()) return INFINITY;

  // Numeric gradients.
  SingleOpGraph fs = singleOpGraph(opType, inputs, attrs, numOutputs);
  Graph &fg = fs.g;
  fg.outputs = {fg.ops[size_t(fs.op)].outputs[outputIndex]};
  auto f = [&](const std::vector<Tensor> &v) {
    auto out = runGraph(fg, feeds(fg, v));
    if (!out) {
      ADD_FAILURE() << llvm::toString(out.takeError());
      return 0.0;
    }
    double s = 0;
    for (int64_t i = 0; i < R.numel(); ++i) s += R.getAsDouble(i) * (*out)[0].getAsDouble(i);
    return s;
  };
  double worst = 0;
  size_t w = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].value.defined() || !inputs[i].differentiate) continue;
    const Tensor &ga = analytic[w++];
    double num = 0, den = 0;
    for (int64_t e = 0; e < vals[i].numel(); ++e) {
      double x0 = vals[i].getAsDouble(e);
      vals[i].setFromDouble(e, x0 + h);
      double fp = f(vals);
      vals[i].setFromDouble(e, x0 - h);
      double fm = f(vals);
      vals[i].setFromDouble(e, x0);
      double gn = (fp - fm) / (2 * h), gan = ga.getAsDouble(e);
      num += (gn - gan) * (gn - gan);
      den += gn * gn;
    }
    double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-12);
    if (rel > worst) worst = rel;
  }
  return worst;
}

} // namespace megac::testing
