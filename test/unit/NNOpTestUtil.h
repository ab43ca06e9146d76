#pragma once
// Helpers for the NN op tests (NormRotaryTest, AttentionTest): running one
// kernel, comparing against expected values, and one-op graphs for type
// inference through the specialize pass.
#include "ir/Graph.h"
#include "passes/Pass.h"
#include "runtime/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <random>

namespace megac::nntest {

using namespace megac::cpu;

inline Tensor f32(Shape s, std::vector<float> v) { return Tensor::fromVector<float>(DType::F32, std::move(s), v); }

inline Tensor randomTensor(Shape s, unsigned seed, DType dt = DType::F32) {
  Tensor t(dt, std::move(s));
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i) t.setFromDouble(i, d(rng));
  return t;
}

// Runs op on the inputs (nullptr: omitted) into outputs allocated as `outs`
// (dtype, shape).
inline std::vector<Tensor> run(const std::string &op, std::vector<const Tensor *> ins,
                               std::vector<std::pair<DType, Shape>> outs, const Attrs &attrs) {
  std::vector<Tensor> result;
  // DType::Undefined: an omitted optional output.
  for (auto &[dt, shape] : outs) result.push_back(dt == DType::Undefined ? Tensor() : Tensor(dt, shape));
  KernelContext ctx{attrs, std::move(ins), {}};
  for (Tensor &t : result) ctx.outputs.push_back(&t);
  if (llvm::Error e = runKernel(op, ctx)) ADD_FAILURE() << llvm::toString(std::move(e));
  return result;
}

// The kernel's error message ("" if it succeeded).
inline std::string kernelErrorText(const std::string &op, std::vector<const Tensor *> ins, DType dt, Shape shape,
                                   const Attrs &attrs) {
  Tensor out(dt, std::move(shape));
  KernelContext ctx{attrs, std::move(ins), {&out}};
  llvm::Error e = runKernel(op, ctx);
  return e ? llvm::toString(std::move(e)) : "";
}

inline std::string errorText(llvm::Error e) { return e ? llvm::toString(std::move(e)) : ""; }

inline void expectClose(const Tensor &got, const std::vector<double> &want, double tol) {
  ASSERT_EQ(got.numel(), int64_t(want.size()));
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.getAsDouble(i), want[size_t(i)], tol * (1 + std::fabs(want[size_t(i)]))) << "element " << i;
}

struct OneOpGraph {
  ir::Graph g;
  std::vector<ir::ValueId> outs;
};

// A graph whose inputs have the given types and whose single op is `type`.
inline std::unique_ptr<OneOpGraph> oneOp(const std::string &type, std::vector<std::optional<ir::TensorType>> ins,
                                         int numOutputs, Attrs attrs) {
  auto r = std::make_unique<OneOpGraph>();
  ir::Op op;
  op.type = type;
  op.name = "n";
  op.attrs = std::move(attrs);
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!ins[i]) {
      op.inputs.push_back(ir::kNoValue);
      continue;
    }
    ir::Value v;
    v.name = "in" + std::to_string(i);
    v.type = *ins[i];
    v.kind = ir::ValueKind::Input;
    ir::ValueId id = r->g.addValueUnique(std::move(v));
    r->g.inputs.push_back(id);
    op.inputs.push_back(id);
  }
  for (int i = 0; i < numOutputs; ++i) {
    ir::Value v;
    v.name = "out" + std::to_string(i);
    ir::ValueId id = r->g.addValueUnique(std::move(v));
    op.outputs.push_back(id);
    r->outs.push_back(id);
  }
  r->g.outputs = r->outs;
  r->g.addOp(std::move(op));
  return r;
}

// Looked up by name: specialize renumbers values.
inline std::string outputType(OneOpGraph &g, int i) { return g.g.type(g.g.lookup("out" + std::to_string(i))).str(); }

inline ir::TensorType tt(DType d, Shape s) { return ir::TensorType{d, std::move(s), false}; }

} // namespace megac::nntest
