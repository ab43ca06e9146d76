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

// Returns the worst relative error over all checked inputs; details go to
// the gtest log. `outputIndex` picks which output is seeded (others get none).
inline double gradCheck(const std::string &opType, const std::vector<GradCheckInput> &inputs, Attrs attrs = {},
                        size_t numOutputs = 1, size_t outputIndex = 0, double h = 1e-6) {
  using namespace ir;
  auto build = [&](Graph &g, std::vector<ValueId> &ins) -> int32_t {
    g.opset = 23;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].value.defined()) {
        ins.push_back(kNoValue);
        continue;
      }
      Value v;
      v.name = "x" + std::to_string(i);
      v.type = {inputs[i].value.dtype(), inputs[i].value.shape(), false};
      if (inputs[i].constant) {
        v.kind = ValueKind::Const;
        v.data = inputs[i].value;
      } else {
        v.kind = ValueKind::Input;
      }
      ValueId id = g.addValueUnique(std::move(v));
      if (!inputs[i].constant) g.inputs.push_back(id);
      ins.push_back(id);
    }
    Op op;
    op.type = opType;
    op.name = "op";
    op.inputs = ins;
    op.attrs = attrs;
    for (size_t k = 0; k < numOutputs; ++k) {
      Value v;
      v.name = "y" + std::to_string(k);
      op.outputs.push_back(g.addValueUnique(std::move(v)));
    }
    int32_t idx = g.addOp(op);
    InferContext ctx(g, idx);
    if (auto e = lookupOpSchema(opType)->infer(ctx)) {
      ADD_FAILURE() << llvm::toString(std::move(e));
      return -1;
    }
    return idx;
  };
  auto feeds = [&](const Graph &g, const std::vector<Tensor> &vals) {
    std::map<std::string, Tensor> f;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].value.defined() && !inputs[i].constant) f["x" + std::to_string(i)] = vals[i];
    return f;
  };
  std::vector<Tensor> vals;
  for (auto &in : inputs) vals.push_back(in.value.defined() ? in.value.clone() : Tensor());

  // Analytic gradients.
  Graph g;
  std::vector<ValueId> ins;
  int32_t idx = build(g, ins);
  if (idx < 0) return INFINITY;
  ValueId y = g.ops[size_t(idx)].outputs[outputIndex];
  Tensor R = randomTensor(g.type(y).dtype, g.type(y).shape, 1234);
  ValueId seed = g.addConst("seed", R);
  std::vector<ValueId> wrt;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].value.defined() && inputs[i].differentiate) wrt.push_back(ins[i]);
  auto r = autodiff::differentiate(g, {y}, {seed}, wrt);
  if (!r) {
    ADD_FAILURE() << llvm::toString(r.takeError());
    return INFINITY;
  }
  g.outputs.clear();
  for (ValueId gv : r->grads) {
    if (gv == kNoValue) {
      ADD_FAILURE() << opType << ": no gradient produced";
      return INFINITY;
    }
    g.outputs.push_back(gv);
  }
  auto analytic = runGraph(g, feeds(g, vals));
  if (!analytic) {
    ADD_FAILURE() << llvm::toString(analytic.takeError());
    return INFINITY;
  }

  // Numeric gradients.
  Graph fg;
  std::vector<ValueId> fins;
  int32_t fidx = build(fg, fins);
  fg.outputs = {fg.ops[size_t(fidx)].outputs[outputIndex]};
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
    const Tensor &ga = (*analytic)[w++];
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
