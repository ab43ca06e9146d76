// Type inference of the elementwise family (ir/ops/ElementwiseOps.cpp) and
// its import hooks for older opsets (frontend/import/ElementwiseImports.cpp),
// the latter through the small models in test/data/elementwise_legacy.
#include "frontend/OnnxImport.h"
#include "ir/Eval.h"
#include "ir/OpSchema.h"
#include "passes/Pass.h"
#include "runtime/core/TensorFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include "onnx.pb.h"

#include <cmath>
#include <fstream>
#include <set>

using namespace megac;
using namespace megac::ir;

namespace {

// One op in a graph of typed inputs, for running its inference.
class OneOp {
public:
  ValueId input(DType dt, Shape s) {
    Value v;
    v.name = "in" + std::to_string(g_.values.size());
    v.kind = ValueKind::Input;
    v.type = {dt, std::move(s), false};
    ValueId id = *g_.addValue(std::move(v));
    g_.inputs.push_back(id);
    return id;
  }
  ValueId constant(Tensor t) { return g_.addConst("c" + std::to_string(g_.values.size()), std::move(t)); }

  // Adds the op with `numOutputs` outputs and runs its inference; "" or the error.
  std::string infer(const std::string &type, std::vector<ValueId> ins, size_t numOutputs = 1, Attrs attrs = {}) {
    Op op;
    op.type = type;
    op.name = "node";
    op.inputs = std::move(ins);
    op.attrs = std::move(attrs);
    for (size_t i = 0; i < numOutputs; ++i) {
      Value v;
      v.name = "out" + std::to_string(i);
      op.outputs.push_back(*g_.addValue(std::move(v)));
    }
    outputs_ = op.outputs;
    int32_t index = g_.addOp(std::move(op));
    const OpSchema *schema = lookupOpSchema(type);
    if (!schema) return "no schema";
    InferContext ctx(g_, index);
    llvm::Error e = schema->infer(ctx);
    return e ? llvm::toString(std::move(e)) : "";
  }
  const TensorType &out(size_t i = 0) const { return g_.type(outputs_[i]); }
  const Value &outValue(size_t i = 0) const { return g_.value(outputs_[i]); }

private:
  Graph g_;
  std::vector<ValueId> outputs_;
};

bool contains(const std::string &s, const std::string &part) { return s.find(part) != std::string::npos; }

TEST(ElementwiseInfer, BinaryOpsBroadcast) {
  OneOp t;
  EXPECT_EQ(t.infer("Add", {t.input(DType::F32, {2, 1, 3}), t.input(DType::F32, {4, 1})}), "");
  EXPECT_EQ(t.out().str(), "f32[2,4,3]");
  OneOp bad;
  std::string e = bad.infer("Mul", {bad.input(DType::F32, {2, 3}), bad.input(DType::F32, {2})});
  EXPECT_TRUE(contains(e, "do not broadcast")) << e;
  OneOp mixed;
  e = mixed.infer("Sub", {mixed.input(DType::F32, {2}), mixed.input(DType::I64, {2})});
  EXPECT_TRUE(contains(e, "same element type")) << e;
}

TEST(ElementwiseInfer, ComparisonsAndLogicGiveBool) {
  OneOp t;
  EXPECT_EQ(t.infer("GreaterOrEqual", {t.input(DType::I64, {3}), t.input(DType::I64, {})}), "");
  EXPECT_EQ(t.out().str(), "bool[3]");
  OneOp l;
  EXPECT_EQ(l.infer("Xor", {l.input(DType::Bool, {2, 1}), l.input(DType::Bool, {5})}), "");
  EXPECT_EQ(l.out().str(), "bool[2,5]");
  OneOp bad;
  EXPECT_TRUE(contains(bad.infer("And", {bad.input(DType::F32, {2}), bad.input(DType::F32, {2})}), "bool"));
  OneOp shift;
  EXPECT_EQ(shift.infer("BitShift", {shift.input(DType::U32, {2}), shift.input(DType::U32, {2})}, 1,
                        [] { Attrs a; a.set("direction", Attr::ofString("LEFT")); return a; }()),
            "");
  OneOp noDir;
  EXPECT_TRUE(contains(noDir.infer("BitShift", {noDir.input(DType::U8, {2}), noDir.input(DType::U8, {2})}),
                       "direction"));
}

TEST(ElementwiseInfer, PowKeepsBaseType) {
  OneOp t;
  EXPECT_EQ(t.infer("Pow", {t.input(DType::I32, {3, 1}), t.input(DType::F32, {2})}), "");
  EXPECT_EQ(t.out().str(), "i32[3,2]");
}

TEST(ElementwiseInfer, UnaryTypeRules) {
  OneOp t;
  EXPECT_EQ(t.infer("Gelu", {t.input(DType::BF16, {2, 8})}), "");
  EXPECT_EQ(t.out().str(), "bf16[2,8]");
  OneOp i;
  std::string e = i.infer("Sqrt", {i.input(DType::I64, {2})});
  EXPECT_TRUE(contains(e, "floating-point")) << e;
  OneOp n;
  EXPECT_EQ(n.infer("Neg", {n.input(DType::I8, {4})}), "");
  OneOp u;
  EXPECT_TRUE(contains(u.infer("Neg", {u.input(DType::U8, {4})}), "signed"));
  OneOp p;
  EXPECT_EQ(p.infer("IsInf", {p.input(DType::F64, {3})}), "");
  EXPECT_EQ(p.out().str(), "bool[3]");
  OneOp g;
  Attrs a;
  a.set("approximate", Attr::ofString("fast"));
  EXPECT_TRUE(contains(g.infer("Gelu", {g.input(DType::F32, {1})}, 1, a), "approximate"));
}

TEST(ElementwiseInfer, VariadicAndWhere) {
  OneOp t;
  EXPECT_EQ(t.infer("Max", {t.input(DType::F32, {3}), t.input(DType::F32, {2, 1}), t.input(DType::F32, {})}), "");
  EXPECT_EQ(t.out().str(), "f32[2,3]");
  OneOp m;
  EXPECT_TRUE(contains(m.infer("Mean", {m.input(DType::I32, {3})}), "floating-point"));
  OneOp w;
  EXPECT_EQ(w.infer("Where", {w.input(DType::Bool, {4, 1, 1}), w.input(DType::I64, {3, 1}), w.input(DType::I64, {2})}),
            "");
  EXPECT_EQ(w.out().str(), "i64[4,3,2]");
  OneOp wt;
  std::string e = wt.infer("Where", {wt.input(DType::Bool, {1}), wt.input(DType::F32, {1}), wt.input(DType::F16, {1})});
  EXPECT_TRUE(contains(e, "same element type")) << e;
}

TEST(ElementwiseInfer, CastAndCastLike) {
  Attrs toI64;
  toI64.set("to", Attr::ofInt(int64_t(DType::I64)));
  OneOp t;
  EXPECT_EQ(t.infer("Cast", {t.input(DType::F32, {2, 3})}, 1, toI64), "");
  EXPECT_EQ(t.out().str(), "i64[2,3]");
  Attrs toString;
  toString.set("to", Attr::ofInt(int64_t(DType::String)));
  OneOp s;
  EXPECT_TRUE(contains(s.infer("Cast", {s.input(DType::F32, {2})}, 1, toString), "string"));
  // A constant input is converted at once.
  OneOp c;
  EXPECT_EQ(c.infer("CastLike", {c.constant(Tensor::fromVector<float>(DType::F32, {2}, {2.7f, -1.5f})),
                                 c.input(DType::I32, {5})}),
            "");
  ASSERT_EQ(c.outValue().kind, ValueKind::Const);
  EXPECT_EQ(c.out().str(), "i32[2]");
  EXPECT_EQ(c.outValue().data->data<int32_t>()[0], 2);
  EXPECT_EQ(c.outValue().data->data<int32_t>()[1], -1);
}

TEST(ElementwiseInfer, ClipBoundsMustBeScalarsOfTheInputType) {
  OneOp t;
  EXPECT_EQ(t.infer("Clip", {t.input(DType::F32, {4}), kNoValue, t.input(DType::F32, {})}), "");
  EXPECT_EQ(t.out().str(), "f32[4]");
  OneOp v;
  EXPECT_TRUE(contains(v.infer("Clip", {v.input(DType::F32, {4}), v.input(DType::F32, {2})}), "scalar"));
  OneOp d;
  EXPECT_TRUE(contains(d.infer("Clip", {d.input(DType::F32, {4}), d.input(DType::F64, {})}), "min is f64"));
}

TEST(ElementwiseInfer, DropoutIsInferenceOnly) {
  OneOp t;
  EXPECT_EQ(t.infer("Dropout", {t.input(DType::F16, {2, 3})}, 2), "");
  EXPECT_EQ(t.out(0).str(), "f16[2,3]");
  EXPECT_EQ(t.out(1).str(), "bool[2,3]");
  OneOp train;
  std::string e = train.infer("Dropout",
                              {train.input(DType::F32, {2}), train.constant(Tensor::scalar(0.1f)),
                               train.constant(Tensor::fromVector<uint8_t>(DType::Bool, {}, {1}))});
  EXPECT_TRUE(contains(e, "training_mode")) << e;
  OneOp off;
  EXPECT_EQ(off.infer("Dropout", {off.input(DType::F32, {2}), kNoValue,
                                  off.constant(Tensor::fromVector<uint8_t>(DType::Bool, {}, {0}))}),
            "");
}

TEST(ElementwiseInfer, IdentityAndPRelu) {
  OneOp t;
  EXPECT_EQ(t.infer("Identity", {t.input(DType::U16, {7})}), "");
  EXPECT_EQ(t.out().str(), "u16[7]");
  OneOp p;
  EXPECT_EQ(p.infer("PRelu", {p.input(DType::F32, {2, 3, 4}), p.input(DType::F32, {3, 1})}), "");
  EXPECT_EQ(p.out().str(), "f32[2,3,4]");
  OneOp q;
  EXPECT_TRUE(contains(q.infer("PRelu", {q.input(DType::F32, {3}), q.input(DType::F32, {2, 3})}), "slope"));
}

// ---- Older-opset forms, imported and run end to end ----

std::string legacyRoot() { return std::string(MEGAC_TEST_DATA) + "/elementwise_legacy"; }

// The model's graph inputs that are not initializers, in order.
std::vector<std::string> graphInputNames(const std::string &path) {
  onnx::ModelProto m;
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(m.ParseFromIstream(&f)) << path;
  std::set<std::string> inits;
  for (const auto &t : m.graph().initializer()) inits.insert(t.name());
  std::vector<std::string> names;
  for (const auto &vi : m.graph().input())
    if (!inits.count(vi.name())) names.push_back(vi.name());
  return names;
}

void runLegacyCase(const std::string &name) {
  std::string dir = legacyRoot() + "/" + name, data = dir + "/test_data_set_0/";
  // Every graph input gets a shape from its data, which marks it as fed
  // (rather than a weight saved without data).
  std::vector<Tensor> inputs;
  frontend::ImportOptions opts;
  for (int i = 0;; ++i) {
    std::string path = data + "input_" + std::to_string(i) + ".pb";
    if (!llvm::sys::fs::exists(path)) break;
    auto t = readTensorFile(path);
    ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
    inputs.push_back(*t);
  }
  std::vector<std::string> names = graphInputNames(dir + "/model.onnx");
  ASSERT_EQ(names.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) opts.inputShapes[names[i]] = inputs[i].shape();

  auto g = frontend::importOnnx(dir + "/model.onnx", opts);
  ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
  Graph &graph = **g;
  if (llvm::Error e = passes::runPipeline(graph, passes::importPipeline(), {})) FAIL() << llvm::toString(std::move(e));
  std::map<std::string, Tensor> feeds;
  ASSERT_EQ(graph.inputs.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) feeds[graph.value(graph.inputs[i]).name] = inputs[i];
  auto outs = runGraph(graph, feeds);
  ASSERT_TRUE(bool(outs)) << llvm::toString(outs.takeError());
  for (size_t i = 0; i < outs->size(); ++i) {
    auto want = readTensorFile(data + "output_" + std::to_string(i) + ".pb");
    ASSERT_TRUE(bool(want)) << llvm::toString(want.takeError());
    const Tensor &got = (*outs)[i];
    ASSERT_EQ(got.dtype(), want->dtype()) << "output " << i;
    ASSERT_EQ(got.shape(), want->shape()) << "output " << i;
    for (int64_t k = 0; k < got.numel(); ++k)
      EXPECT_NEAR(got.getAsDouble(k), want->getAsDouble(k), 1e-6 * (1 + std::fabs(want->getAsDouble(k))))
          << "output " << i << " element " << k;
  }
  // The rewritten ops carry no legacy attributes.
  for (const Op &op : graph.ops)
    for (const char *legacy : {"consumed_inputs", "broadcast", "axis", "ratio", "min", "max"})
      EXPECT_FALSE(op.attrs.has(legacy)) << op.type << " still has " << legacy;
}

TEST(ElementwiseImports, OlderOpsetFormsMatchNumpy) {
  std::vector<std::string> names;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(legacyRoot(), ec), end; it != end && !ec; it.increment(ec))
    if (llvm::sys::fs::is_directory(it->path())) names.push_back(llvm::sys::path::filename(it->path()).str());
  std::sort(names.begin(), names.end());
  ASSERT_GE(names.size(), 8u) << "test data missing in " << legacyRoot();
  for (const std::string &n : names) {
    SCOPED_TRACE(n);
    runLegacyCase(n);
  }
}

} // namespace
