// Import hooks and type inference of the reduction, softmax and matmul ops:
// one-node ONNX models in old and new opset forms are built here, imported,
// specialized and run, and compared with values computed in the test.
#include "frontend/OnnxImport.h"
#include "ir/Eval.h"
#include "passes/Pass.h"

#include "onnx.pb.h"

#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

using namespace megac;

namespace {

struct NodeModel {
  std::string op;
  int64_t opset = 13;
  std::vector<std::pair<std::string, Tensor>> inputs; // fed at run time
  std::vector<std::pair<std::string, Tensor>> initializers;
  std::vector<std::string> nodeInputs; // defaults to the inputs, then the initializers
  std::vector<onnx::AttributeProto> attrs;
};

onnx::AttributeProto intAttr(const std::string &name, int64_t v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(v);
  return a;
}

onnx::AttributeProto intsAttr(const std::string &name, std::vector<int64_t> v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a.add_ints(x);
  return a;
}

void toProto(const std::string &name, const Tensor &t, onnx::TensorProto &p) {
  p.set_name(name);
  p.set_data_type(int(t.dtype()));
  for (int64_t d : t.shape()) p.add_dims(d);
  p.set_raw_data(std::string(static_cast<const char *>(t.raw()), t.nbytes()));
}

std::string writeModel(const NodeModel &m) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(m.opset);
  onnx::GraphProto *g = model.mutable_graph();
  g->set_name("test");
  onnx::NodeProto *n = g->add_node();
  n->set_op_type(m.op);
  n->set_name("node");
  for (const auto &[name, t] : m.inputs) {
    onnx::ValueInfoProto *vi = g->add_input();
    vi->set_name(name);
    auto *tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(int(t.dtype()));
    auto *shape = tt->mutable_shape();
    for (int64_t d : t.shape()) shape->add_dim()->set_dim_value(d);
    if (m.nodeInputs.empty()) n->add_input(name);
  }
  for (const auto &[name, t] : m.initializers) {
    toProto(name, t, *g->add_initializer());
    if (m.nodeInputs.empty()) n->add_input(name);
  }
  for (const std::string &name : m.nodeInputs) n->add_input(name);
  for (const auto &a : m.attrs) *n->add_attribute() = a;
  n->add_output("y");
  g->add_output()->set_name("y");
  llvm::SmallString<128> path;
  llvm::sys::fs::createTemporaryFile("megac-linalg", "onnx", path);
  std::ofstream f(std::string(path), std::ios::binary);
  model.SerializeToOstream(&f);
  return std::string(path);
}

struct RunResult {
  std::string error; // empty on success
  ir::TensorType type;
  Tensor value;
};

RunResult importAndRun(const NodeModel &m) {
  std::string path = writeModel(m);
  RunResult r;
  frontend::ImportOptions opts;
  for (const auto &[name, t] : m.inputs) opts.inputShapes[name] = t.shape();
  auto g = frontend::importOnnx(path, opts);
  llvm::sys::fs::remove(path);
  if (!g) {
    r.error = llvm::toString(g.takeError());
    return r;
  }
  if (auto e = passes::runPipeline(**g, passes::importPipeline(), passes::PassOptions())) {
    r.error = llvm::toString(std::move(e));
    return r;
  }
  std::map<std::string, Tensor> feeds(m.inputs.begin(), m.inputs.end());
  r.type = (*g)->type((*g)->outputs[0]);
  auto outs = ir::runGraph(**g, feeds);
  if (!outs) {
    r.error = llvm::toString(outs.takeError());
    return r;
  }
  r.value = (*outs)[0];
  return r;
}

Tensor randomF32(Shape s, unsigned seed) {
  Tensor t(DType::F32, std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// Softmax of x viewed as [rows, x.numel() / rows], row by row, in double.
std::vector<double> softmaxRows(const Tensor &x, int64_t rows, bool log) {
  int64_t n = x.numel() / rows;
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x.data<float>() + r * n;
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(row[i]));
    for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - mx);
    for (int64_t i = 0; i < n; ++i) out.push_back(log ? row[i] - mx - std::log(sum) : std::exp(row[i] - mx) / sum);
  }
  return out;
}

void expectValues(const RunResult &r, const std::vector<double> &expect, double tol = 1e-6) {
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.value.numel(), int64_t(expect.size()));
  for (size_t i = 0; i < expect.size(); ++i) ASSERT_NEAR(r.value.getAsDouble(int64_t(i)), expect[i], tol) << i;
}

} // namespace

TEST(LinalgImport, LegacySoftmaxFlattensAtAxis) {
  Tensor x = randomF32({2, 3, 4}, 1);
  // opset 11, axis 1: each of the 2 rows of 12 values is normalized together.
  NodeModel m{"Softmax", 11, {{"x", x}}, {}, {}, {intAttr("axis", 1)}};
  RunResult r = importAndRun(m);
  EXPECT_EQ(r.type.str(), "f32[2,3,4]");
  expectValues(r, softmaxRows(x, 2, false));
  // The default axis before opset 13 is 1 as well.
  NodeModel logDefault{"LogSoftmax", 11, {{"x", x}}, {}, {}, {}};
  expectValues(importAndRun(logDefault), softmaxRows(x, 2, true));
  // axis 0: one row of everything.
  NodeModel all{"Softmax", 9, {{"x", x}}, {}, {}, {intAttr("axis", 0)}};
  expectValues(importAndRun(all), softmaxRows(x, 1, false));
  // axis -1 (and the last axis) mean the same in both forms.
  NodeModel last{"LogSoftmax", 12, {{"x", x}}, {}, {}, {intAttr("axis", 2)}};
  expectValues(importAndRun(last), softmaxRows(x, 6, true));
}

TEST(LinalgImport, Opset13SoftmaxUsesOneAxis) {
  Tensor x = randomF32({2, 3, 4}, 2);
  NodeModel m{"Softmax", 13, {{"x", x}}, {}, {}, {}}; // default axis -1
  expectValues(importAndRun(m), softmaxRows(x, 6, false));
  NodeModel axis1{"Softmax", 13, {{"x", x}}, {}, {}, {intAttr("axis", 1)}};
  RunResult r = importAndRun(axis1);
  ASSERT_EQ(r.error, "");
  for (int64_t b = 0; b < 2; ++b) // each (b, :, k) column sums to 1
    for (int64_t k = 0; k < 4; ++k) {
      double s = 0;
      for (int64_t j = 0; j < 3; ++j) s += r.value.data<float>()[b * 12 + j * 4 + k];
      EXPECT_NEAR(s, 1.0, 1e-6);
    }
}

TEST(LinalgImport, ReduceAxesAttributeBecomesInput) {
  Tensor x = randomF32({2, 3, 4}, 3);
  const float *v = x.data<float>();
  // ReduceMean-13: axes attribute; keepdims=0.
  NodeModel mean{"ReduceMean", 13, {{"x", x}}, {}, {}, {intsAttr("axes", {1}), intAttr("keepdims", 0)}};
  RunResult r = importAndRun(mean);
  EXPECT_EQ(r.type.str(), "f32[2,4]");
  std::vector<double> expect;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t k = 0; k < 4; ++k) expect.push_back((double(v[b * 12 + k]) + v[b * 12 + 4 + k] + v[b * 12 + 8 + k]) / 3);
  expectValues(r, expect);
  // ReduceSum-11: axes attribute, keepdims default 1.
  NodeModel sum{"ReduceSum", 11, {{"x", x}}, {}, {}, {intsAttr("axes", {0, -1})}};
  r = importAndRun(sum);
  EXPECT_EQ(r.type.str(), "f32[1,3,1]");
  expect.clear();
  for (int64_t j = 0; j < 3; ++j) {
    double s = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t k = 0; k < 4; ++k) s += v[b * 12 + j * 4 + k];
    expect.push_back(s);
  }
  expectValues(r, expect, 1e-5);
  // ReduceSum-13: axes as an input.
  Tensor axes = Tensor::fromVector<int64_t>(DType::I64, {2}, {0, 2});
  NodeModel sum13{"ReduceSum", 13, {{"x", x}}, {{"axes", axes}}, {}, {}};
  r = importAndRun(sum13);
  EXPECT_EQ(r.type.str(), "f32[1,3,1]");
  expectValues(r, expect, 1e-5);
  // ReduceMax-18: no axes and noop_with_empty_axes: the input unchanged.
  NodeModel noop{"ReduceMax", 18, {{"x", x}}, {}, {}, {intAttr("noop_with_empty_axes", 1)}};
  r = importAndRun(noop);
  EXPECT_EQ(r.type.str(), "f32[2,3,4]");
  expectValues(r, std::vector<double>(v, v + 24));
  // ReduceL2-13 without axes: everything.
  NodeModel l2{"ReduceL2", 13, {{"x", x}}, {}, {}, {intAttr("keepdims", 0)}};
  double sq = 0;
  for (int i = 0; i < 24; ++i) sq += double(v[i]) * v[i];
  r = importAndRun(l2);
  EXPECT_EQ(r.type.str(), "f32[]");
  expectValues(r, {std::sqrt(sq)}, 1e-5);
}

TEST(LinalgImport, ReduceAxesMustBeConstant) {
  Tensor x = randomF32({2, 3}, 4);
  Tensor axes = Tensor::fromVector<int64_t>(DType::I64, {1}, {1});
  NodeModel m{"ReduceSum", 13, {{"x", x}, {"axes", axes}}, {}, {}, {}};
  RunResult r = importAndRun(m);
  EXPECT_NE(r.error.find("known at compile time"), std::string::npos) << r.error;
  NodeModel bad{"ReduceMean", 13, {{"x", x}}, {}, {}, {intsAttr("axes", {2})}};
  r = importAndRun(bad);
  EXPECT_NE(r.error.find("out of range"), std::string::npos) << r.error;
}

TEST(LinalgImport, ArgMaxTypes) {
  Tensor x = Tensor::fromVector<float>(DType::F32, {2, 3}, {1, 9, 3, 7, 2, 7});
  NodeModel m{"ArgMax", 13, {{"x", x}}, {}, {}, {intAttr("axis", 1), intAttr("select_last_index", 1)}};
  RunResult r = importAndRun(m);
  EXPECT_EQ(r.type.str(), "i64[2,1]");
  expectValues(r, {1, 2});
  NodeModel mn{"ArgMin", 11, {{"x", x}}, {}, {}, {intAttr("keepdims", 0)}};
  r = importAndRun(mn);
  EXPECT_EQ(r.type.str(), "i64[3]");
  expectValues(r, {0, 1, 0});
}

TEST(LinalgImport, MatMulAndGemmTypes) {
  Tensor a = randomF32({4}, 5), b = randomF32({2, 4, 3}, 6);
  NodeModel vecMat{"MatMul", 13, {{"a", a}, {"b", b}}, {}, {}, {}};
  RunResult r = importAndRun(vecMat);
  EXPECT_EQ(r.type.str(), "f32[2,3]");
  std::vector<double> expect;
  for (int64_t bi = 0; bi < 2; ++bi)
    for (int64_t j = 0; j < 3; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 4; ++k) s += double(a.data<float>()[k]) * b.data<float>()[bi * 12 + k * 3 + j];
      expect.push_back(s);
    }
  expectValues(r, expect, 1e-5);

  Tensor c = randomF32({5, 1, 1, 4}, 7);
  NodeModel broadcast{"MatMul", 13, {{"c", c}, {"b", b}}, {}, {}, {}};
  EXPECT_EQ(importAndRun(broadcast).type.str(), "f32[5,2,1,3]"); // batch [5,1] and [2] broadcast to [5,2]
}

TEST(LinalgImport, MatMulAndGemmInferenceErrors) {
  Tensor a = randomF32({2, 3}, 8), b = randomF32({4, 2}, 9);
  NodeModel m{"MatMul", 13, {{"a", a}, {"b", b}}, {}, {}, {}};
  EXPECT_NE(importAndRun(m).error.find("inner dimensions"), std::string::npos);
  Tensor bias = randomF32({3}, 10);
  NodeModel gemm{"Gemm", 11, {{"a", a}, {"b", b}}, {{"c", bias}}, {}, {intAttr("transA", 1), intAttr("transB", 1)}};
  RunResult r = importAndRun(gemm); // A^T [3,2] x B^T [2,4] = [3,4]; C [3] does not broadcast to it
  EXPECT_NE(r.error.find("does not broadcast"), std::string::npos) << r.error;
  Tensor bias4 = randomF32({4}, 11);
  NodeModel ok{"Gemm", 11, {{"a", a}, {"b", b}}, {{"c", bias4}}, {}, {intAttr("transA", 1), intAttr("transB", 1)}};
  r = importAndRun(ok);
  EXPECT_EQ(r.type.str(), "f32[3,4]");
  std::vector<double> expect;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      double s = bias4.data<float>()[j];
      for (int64_t k = 0; k < 2; ++k) s += double(a.data<float>()[k * 3 + i]) * b.data<float>()[j * 2 + k];
      expect.push_back(s);
    }
  expectValues(r, expect, 1e-5);
}
