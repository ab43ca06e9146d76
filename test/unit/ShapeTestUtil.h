#pragma once
// Helpers for the shape-family tests: running a kernel, random tensors,
// and small graphs whose ops are type-inferred one at a time.
#include "ir/Graph.h"
#include "ir/OpSchema.h"
#include "runtime/cpu/Kernel.h"

#include <gtest/gtest.h>

#include <random>

namespace megac::shapetest {

inline Tensor i64s(Shape s, std::vector<int64_t> v) { return Tensor::fromVector<int64_t>(DType::I64, std::move(s), v); }
inline Tensor i64v(std::vector<int64_t> v) {
  int64_t n = int64_t(v.size());
  return i64s({n}, std::move(v));
}
inline Tensor i64scalar(int64_t v) { return i64s({}, {v}); }
inline Tensor f32s(Shape s, std::vector<float> v) { return Tensor::fromVector<float>(DType::F32, std::move(s), v); }

// Values 0, 1, 2, ... (as the dtype) in row-major order; 8- and 16-bit
// integers wrap (converting 256.0 to uint8 is undefined: UBSan's
// float-cast-overflow in the fuzz build's unit run).
inline Tensor iota(DType dt, Shape s) {
  Tensor t(dt, std::move(s));
  int bits = 0;
  if (dt == DType::U8 || dt == DType::I8) bits = 8;
  if (dt == DType::U16 || dt == DType::I16) bits = 16;
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t v = i;
    if (bits) {
      v = i & ((int64_t(1) << bits) - 1);
      if ((dt == DType::I8 || dt == DType::I16) && v >= (int64_t(1) << (bits - 1))) v -= int64_t(1) << bits;
    }
    t.setFromDouble(i, double(v));
  }
  return t;
}

inline Tensor randomTensor(Shape s, unsigned seed, DType dt = DType::F32) {
  Tensor t(dt, std::move(s));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-50, 50);
  for (int64_t i = 0; i < t.numel(); ++i) t.setFromDouble(i, d(rng) * 0.25);
  return t;
}

inline std::vector<double> values(const Tensor &t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.getAsDouble(i));
  return v;
}

// Runs a kernel into outputs allocated as (dtype, shape); returns the error text or "".
inline std::string runKernelInto(const std::string &op, std::vector<const Tensor *> ins, std::vector<Tensor> &outs,
                                 const Attrs &attrs = {}) {
  cpu::KernelContext ctx{attrs, std::move(ins), {}};
  for (Tensor &t : outs) ctx.outputs.push_back(&t);
  llvm::Error e = cpu::runKernel(op, ctx);
  return e ? llvm::toString(std::move(e)) : "";
}

// Runs a one-output kernel; test failure on error.
inline Tensor run1(const std::string &op, std::vector<const Tensor *> ins, DType dt, Shape shape,
                   const Attrs &attrs = {}) {
  std::vector<Tensor> outs{Tensor(dt, std::move(shape))};
  std::string err = runKernelInto(op, std::move(ins), outs, attrs);
  EXPECT_EQ(err, "") << op;
  return outs[0];
}

inline Attrs attrs(std::initializer_list<std::pair<std::string, Attr>> kv) {
  Attrs a;
  for (auto &p : kv) a.set(p.first, p.second);
  return a;
}

// A graph built op by op; infer() runs each op's type inference.
struct GraphBuilder {
  ir::Graph g;

  ir::ValueId input(const std::string &name, DType dt, Shape s) {
    ir::Value v;
    v.name = name;
    v.kind = ir::ValueKind::Input;
    v.type = {dt, std::move(s), false};
    ir::ValueId id = g.addValueUnique(std::move(v));
    g.inputs.push_back(id);
    return id;
  }
  ir::ValueId constant(const std::string &name, Tensor t) { return g.addConst(name, std::move(t)); }
  // Adds op `type`; returns its outputs.
  std::vector<ir::ValueId> op(const std::string &type, std::vector<ir::ValueId> ins, int numOutputs = 1,
                              Attrs a = {}) {
    ir::Op op;
    op.type = type;
    op.name = type + "_" + std::to_string(g.ops.size());
    op.inputs = std::move(ins);
    op.attrs = std::move(a);
    for (int k = 0; k < numOutputs; ++k) {
      ir::Value v;
      v.name = op.name + ".out" + std::to_string(k);
      op.outputs.push_back(g.addValueUnique(std::move(v)));
    }
    g.addOp(std::move(op));
    return g.ops.back().outputs;
  }
  // Type inference for the last op; "" or the error text.
  std::string inferLast() {
    int32_t i = int32_t(g.ops.size()) - 1;
    const ir::OpSchema *s = ir::lookupOpSchema(g.ops[size_t(i)].type);
    if (!s) return "no schema";
    ir::InferContext ctx(g, i);
    llvm::Error e = s->infer(ctx);
    return e ? llvm::toString(std::move(e)) : "";
  }
  const ir::TensorType &type(ir::ValueId v) const { return g.type(v); }
};

} // namespace megac::shapetest
