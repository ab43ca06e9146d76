// megac export: checkpoint -> ONNX with the trained weights, and safetensors.
#include "CheckpointOfTensors.h"
#include "FixtureTestUtil.h"

#include "frontend/OnnxExport.h"
#include "ir/Eval.h"
#include "runtime/core/Safetensors.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/CheckpointWeights.h"

#include "onnx.pb.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cstring>

namespace megac {
namespace {

using testing::fixtureDir;

std::string tempDir() {
  llvm::SmallString<128> dir;
  EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("megac-export-test", dir));
  return std::string(dir);
}

std::string join(const std::string &a, const std::string &b) { return a + "/" + b; }

onnx::ModelProto readModel(const std::string &path) {
  onnx::ModelProto m;
  std::string bytes = testing::readFile(path);
  EXPECT_TRUE(m.ParseFromString(bytes)) << path;
  return m;
}

const onnx::TensorProto *findInit(const onnx::ModelProto &m, const std::string &name) {
  for (const auto &t : m.graph().initializer())
    if (t.name() == name) return &t;
  return nullptr;
}

// Writes a checkpoint of `params` (gaps between them, as the trainer leaves)
// through the trainer's own checkpoint writer.
void writeCheckpoint(const std::string &dir, const std::string &modelPath, const std::vector<NamedTensor> &params,
                     int64_t step = 3) {
  auto [plan, state] = testing::planAndStateOf(params, modelPath, 5, 7, -99.0f); // offset 5: offsets must be honored
  runtime::CheckpointInfo info;
  info.step = step;
  ASSERT_FALSE(bool(runtime::saveCheckpoint(dir, plan, state, info)));
}

Tensor patterned(const Shape &shape, float base) {
  Tensor t(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = base + 0.001f * float(i % 997);
  return t;
}

std::vector<float> floatsOf(const onnx::TensorProto &p) {
  std::vector<float> v(p.raw_data().size() / 4);
  std::memcpy(v.data(), p.raw_data().data(), v.size() * 4);
  return v;
}

const std::string kLlama = fixtureDir("llama") + "/model.onnx";

// The parameters a training run of the llama fixture has: every float
// initializer of more than one element except the rotary constant.
std::vector<NamedTensor> llamaWeightsFromModel() {
  onnx::ModelProto m = readModel(kLlama);
  std::vector<NamedTensor> out;
  for (const auto &t : m.graph().initializer()) {
    if (t.data_type() != onnx::TensorProto::FLOAT || t.dims_size() != 2 || t.name() == "expand_2") continue;
    auto v = tensorFromProto(t, t.name());
    EXPECT_TRUE(bool(v));
    out.push_back({t.name(), *v});
  }
  for (const auto &t : m.graph().initializer())
    if (llvm::StringRef(t.name()).endswith("norm.weight")) out.push_back({t.name(), *tensorFromProto(t, t.name())});
  return out;
}

Tensor runLogits(const std::string &modelPath) {
  Tensor ids = testing::loadRef("llama", "input_ids.pb");
  frontend::ImportOptions opts;
  opts.firstInputShape = ids.shape();
  auto g = frontend::importOnnx(modelPath, opts);
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError());
    return Tensor();
  }
  if (auto e = passes::runPipeline(**g, passes::importPipeline(), {})) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return Tensor();
  }
  auto outs = ir::runGraph(**g, {{"input_ids", ids}});
  if (!outs) {
    ADD_FAILURE() << llvm::toString(outs.takeError());
    return Tensor();
  }
  return (*outs)[0];
}

TEST(Export, ReadsCheckpointWeightsAtTheirOffsets) {
  std::string dir = tempDir();
  std::vector<NamedTensor> params = {{"a", patterned({2, 3}, 1.0f)}, {"b", patterned({4}, -2.0f)}};
  writeCheckpoint(dir, "m.onnx", params, 7);
  auto w = runtime::readCheckpointWeights(dir);
  ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
  EXPECT_EQ(w->meta.step(), 7);
  EXPECT_EQ(w->meta.model_path(), "m.onnx");
  ASSERT_EQ(w->params.size(), 2u);
  EXPECT_EQ(w->params[1].name, "b");
  EXPECT_EQ(w->params[1].tensor.shape(), Shape({4}));
  EXPECT_FLOAT_EQ(w->params[0].tensor.data<float>()[5], 1.005f);
  EXPECT_FLOAT_EQ(w->params[1].tensor.data<float>()[3], -1.997f);
}

TEST(Export, ReplacesParametersAndKeepsEverythingElse) {
  std::string dir = tempDir();
  std::vector<NamedTensor> params = {{"val_93", patterned({64, 64}, 0.25f)},
                                     {"m.model.norm.weight", patterned({64}, 3.0f)}};
  writeCheckpoint(join(dir, "ckpt"), kLlama, params);
  auto w = runtime::readCheckpointWeights(join(dir, "ckpt"));
  ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
  std::string out = join(dir, "trained.onnx");
  auto r = frontend::exportOnnxWithWeights(w->meta.model_path(), w->params, out);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->replaced, 2);
  EXPECT_TRUE(r->dataPath.empty());

  onnx::ModelProto orig = readModel(kLlama), got = readModel(out);
  ASSERT_EQ(got.graph().initializer_size(), orig.graph().initializer_size());
  for (const auto &t : orig.graph().initializer()) {
    const onnx::TensorProto *e = findInit(got, t.name());
    ASSERT_NE(e, nullptr) << t.name();
    if (t.name() == "val_93" || t.name() == "m.model.norm.weight") continue;
    EXPECT_EQ(e->SerializeAsString(), t.SerializeAsString()) << t.name() << " changed";
  }
  std::vector<float> v = floatsOf(*findInit(got, "val_93"));
  ASSERT_EQ(v.size(), 64u * 64u);
  EXPECT_FLOAT_EQ(v[0], 0.25f);
  EXPECT_FLOAT_EQ(v[1000], 0.25f + 0.001f * 3);
  EXPECT_EQ(findInit(got, "val_93")->dims_size(), 2);
  std::vector<float> n = floatsOf(*findInit(got, "m.model.norm.weight"));
  ASSERT_EQ(n.size(), 64u);
  EXPECT_FLOAT_EQ(n[63], 3.063f);
  // The graph itself is untouched.
  EXPECT_EQ(got.graph().node_size(), orig.graph().node_size());
  for (int i = 0; i < orig.graph().node_size(); ++i)
    EXPECT_EQ(got.graph().node(i).SerializeAsString(), orig.graph().node(i).SerializeAsString());
  EXPECT_EQ(got.graph().input_size(), 1);
  EXPECT_EQ(got.opset_import_size(), orig.opset_import_size());
}

// A checkpoint that holds the model's own weights exports a model with
// byte-identical initializers, which reproduces PyTorch's logits.
TEST(Export, UnchangedWeightsReproduceTheReferenceLogits) {
  std::string dir = tempDir();
  std::vector<NamedTensor> params = llamaWeightsFromModel();
  ASSERT_GE(params.size(), 20u);
  writeCheckpoint(join(dir, "ckpt"), kLlama, params);
  auto w = runtime::readCheckpointWeights(join(dir, "ckpt"));
  ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
  std::string out = join(dir, "same.onnx");
  auto r = frontend::exportOnnxWithWeights(kLlama, w->params, out);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->replaced, int(params.size()));
  onnx::ModelProto orig = readModel(kLlama), got = readModel(out);
  for (const auto &t : orig.graph().initializer()) {
    auto a = tensorFromProto(t, t.name());
    auto b = tensorFromProto(*findInit(got, t.name()), t.name());
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->nbytes(), b->nbytes());
    EXPECT_EQ(std::memcmp(a->raw(), b->raw(), a->nbytes()), 0) << t.name();
  }
  Tensor logits = runLogits(out), ref = testing::loadRef("llama", "logits.pb");
  ASSERT_EQ(logits.shape(), ref.shape());
  EXPECT_LT(testing::relativeError(logits, ref), 1e-5);
}

TEST(Export, ExternalDataWhenForced) {
  std::string dir = tempDir();
  std::vector<NamedTensor> params = llamaWeightsFromModel();
  params[0].tensor = patterned(params[0].tensor.shape(), 0.5f);
  writeCheckpoint(join(dir, "ckpt"), kLlama, params);
  auto w = runtime::readCheckpointWeights(join(dir, "ckpt"));
  ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
  frontend::OnnxExportOptions opts;
  opts.externalDataAbove = 0;
  std::string out = join(dir, "ext.onnx");
  auto r = frontend::exportOnnxWithWeights(kLlama, w->params, out, opts);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->dataPath, out + ".data");
  onnx::ModelProto orig = readModel(kLlama), got = readModel(out);
  int large = 0; // initializers of at least 1 KB
  for (const auto &t : orig.graph().initializer()) large += tensorFromProto(t, t.name())->nbytes() >= 1024;
  EXPECT_EQ(r->externalTensors, large);
  EXPECT_GE(large, 10);
  int external = 0;
  for (const auto &t : got.graph().initializer()) {
    auto o = tensorFromProto(*findInit(orig, t.name()), t.name());
    ASSERT_TRUE(bool(o));
    if (!hasExternalData(t)) {
      EXPECT_LT(o->nbytes(), 1024u) << t.name() << " should be external";
      continue;
    }
    ++external;
    EXPECT_GE(o->nbytes(), 1024u);
    auto loc = externalLocation(t, t.name());
    ASSERT_TRUE(bool(loc));
    EXPECT_EQ(loc->location, "ext.onnx.data");
    EXPECT_EQ(loc->offset % 64, 0) << t.name();
    EXPECT_EQ(loc->length, int64_t(o->nbytes()));
    std::vector<char> bytes(o->nbytes());
    ASSERT_FALSE(bool(readExternal(dir, *loc, t.name(), bytes.data(), int64_t(bytes.size()))));
    if (t.name() == params[0].name)
      EXPECT_EQ(std::memcmp(bytes.data(), params[0].tensor.raw(), bytes.size()), 0);
    else
      EXPECT_EQ(std::memcmp(bytes.data(), o->raw(), bytes.size()), 0) << t.name();
  }
  EXPECT_EQ(external, r->externalTensors);
  // The model runs from its directory (checked against the same weights inline).
  params[0].tensor = *tensorFromProto(*findInit(orig, params[0].name), params[0].name);
  std::string inlineOut = join(dir, "inline.onnx");
  writeCheckpoint(join(dir, "ckpt2"), kLlama, params);
  auto w2 = runtime::readCheckpointWeights(join(dir, "ckpt2"));
  ASSERT_TRUE(bool(w2));
  ASSERT_TRUE(bool(frontend::exportOnnxWithWeights(kLlama, w2->params, join(dir, "ext2.onnx"), opts)));
  Tensor logits = runLogits(join(dir, "ext2.onnx")), ref = testing::loadRef("llama", "logits.pb");
  EXPECT_LT(testing::relativeError(logits, ref), 1e-5);
}

// y = x @ W with W a graph input that has a shape and no data.
std::string writeShapesOnlyModel(const std::string &dir) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto *g = m.mutable_graph();
  g->set_name("g");
  auto addInput = [&](const std::string &name, std::vector<int64_t> dims) {
    auto *vi = g->add_input();
    vi->set_name(name);
    auto *tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  addInput("x", {2, 3});
  addInput("w", {3, 4});
  auto *out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  auto *n = g->add_node();
  n->set_op_type("MatMul");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  std::string path = join(dir, "shapes.onnx");
  EXPECT_FALSE(bool(writeFileAtomically(path, m.SerializeAsString())));
  return path;
}

TEST(Export, DataLessInputBecomesInitializer) {
  std::string dir = tempDir();
  std::string model = writeShapesOnlyModel(dir);
  Tensor w(DType::F32, {3, 4});
  for (int i = 0; i < 12; ++i) w.data<float>()[i] = float(i) - 5.0f;
  writeCheckpoint(join(dir, "ckpt"), model, {{"w", w}});
  auto cw = runtime::readCheckpointWeights(join(dir, "ckpt"));
  ASSERT_TRUE(bool(cw));
  std::string out = join(dir, "trained.onnx");
  auto r = frontend::exportOnnxWithWeights(model, cw->params, out);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->promotedInputs, 1);
  onnx::ModelProto got = readModel(out);
  ASSERT_EQ(got.graph().input_size(), 1);
  EXPECT_EQ(got.graph().input(0).name(), "x");
  ASSERT_NE(findInit(got, "w"), nullptr);

  Tensor x(DType::F32, {2, 3});
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = 0.5f * float(i + 1);
  auto g = frontend::importOnnx(out, {});
  ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
  ASSERT_FALSE(bool(passes::runPipeline(**g, passes::importPipeline(), {})));
  auto y = ir::runGraph(**g, {{"x", x}});
  ASSERT_TRUE(bool(y)) << llvm::toString(y.takeError());
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      float ref = 0;
      for (int k = 0; k < 3; ++k) ref += x.data<float>()[i * 3 + k] * w.data<float>()[k * 4 + j];
      EXPECT_FLOAT_EQ((*y)[0].data<float>()[i * 4 + j], ref);
    }
}

// Errors: one message, nothing written.
class ExportErrors : public ::testing::Test {
protected:
  void SetUp() override {
    dir = tempDir();
    out = join(dir, "out.onnx");
    ASSERT_FALSE(bool(writeFileAtomically(out, "previous")));
  }
  std::string exportError(const std::string &model, const std::vector<NamedTensor> &params) {
    auto r = frontend::exportOnnxWithWeights(model, params, out);
    EXPECT_FALSE(bool(r));
    std::string msg = r ? "" : llvm::toString(r.takeError());
    EXPECT_EQ(testing::readFile(out), "previous");
    EXPECT_FALSE(llvm::sys::fs::exists(out + ".tmp"));
    return msg;
  }
  std::string dir, out;
};

TEST_F(ExportErrors, ParameterNotInModel) {
  EXPECT_NE(exportError(kLlama, {{"nope", patterned({2}, 0)}}).find("'nope' is neither an initializer nor an input"),
            std::string::npos);
}

TEST_F(ExportErrors, ShapeMismatch) {
  std::string m = exportError(kLlama, {{"val_93", patterned({64, 32}, 0)}});
  EXPECT_NE(m.find("'val_93' has shape [64,64] in the model but [64,32] in the checkpoint"), std::string::npos) << m;
  std::string model = writeShapesOnlyModel(dir);
  m = exportError(model, {{"w", patterned({4, 3}, 0)}});
  EXPECT_NE(m.find("'w' has shape [3,4] in the model but [4,3]"), std::string::npos) << m;
}

TEST_F(ExportErrors, MissingModel) {
  EXPECT_NE(exportError(join(dir, "gone.onnx"), {}).find("cannot read the model"), std::string::npos);
}

TEST_F(ExportErrors, CorruptModel) {
  ASSERT_FALSE(bool(writeFileAtomically(join(dir, "bad.onnx"), "\xff\xff\xff garbage")));
  EXPECT_NE(exportError(join(dir, "bad.onnx"), {}).find("not a valid ONNX model"), std::string::npos);
}

TEST_F(ExportErrors, BadCheckpoints) {
  auto fails = [&](const std::string &d, const std::string &what) {
    auto w = runtime::readCheckpointWeights(d);
    ASSERT_FALSE(bool(w)) << d;
    std::string m = llvm::toString(w.takeError());
    EXPECT_NE(m.find(what), std::string::npos) << m;
  };
  fails(join(dir, "none"), "not a checkpoint directory");
  std::string ck = join(dir, "ck");
  writeCheckpoint(ck, kLlama, {{"val_93", patterned({64, 64}, 0)}});
  auto step = runtime::resolveCheckpoint(ck);
  ASSERT_TRUE(bool(step));
  // Truncated parameter array.
  std::string params = testing::readFile(join(*step, "params.f32"));
  ASSERT_FALSE(bool(writeFileAtomically(join(*step, "params.f32"), params.substr(0, 100))));
  fails(ck, "truncated");
  ASSERT_FALSE(bool(writeFileAtomically(join(*step, "params.f32"), params)));
  ASSERT_TRUE(bool(runtime::readCheckpointWeights(ck)));
  // Corrupt metadata.
  std::string meta = testing::readFile(join(*step, "checkpoint.meta"));
  ASSERT_FALSE(bool(writeFileAtomically(join(*step, "checkpoint.meta"), "MEGACCKP\xff\xff\xff\xff")));
  fails(ck, "corrupt checkpoint metadata");
  ASSERT_FALSE(bool(writeFileAtomically(join(*step, "checkpoint.meta"), "not a checkpoint")));
  fails(ck, "not a megac checkpoint");
  // A parameter whose offset lies past the array.
  auto decoded = runtime::decodeCheckpointMeta(meta, "checkpoint.meta");
  ASSERT_TRUE(bool(decoded));
  plan::CheckpointMeta pm = *decoded;
  pm.mutable_params(0)->set_host_offset(pm.host_elements());
  ASSERT_FALSE(bool(writeFileAtomically(join(*step, "checkpoint.meta"), runtime::encodeCheckpointMeta(pm))));
  fails(ck, "lies outside params.f32");
  // `latest` names a step that is gone.
  ASSERT_FALSE(bool(writeFileAtomically(join(ck, "latest"), "step-00000099\n")));
  fails(ck, "missing");
}

TEST(Safetensors, LayoutByHand) {
  Tensor a(DType::F32, {2});
  a.data<float>()[0] = 1.0f;
  a.data<float>()[1] = -2.0f;
  Tensor b(DType::F32, {1, 1});
  b.data<float>()[0] = 0.5f;
  auto bytes = serializeSafetensors({{"w.a", a}, {"b\"q", b}}, {{"format", "pt"}});
  ASSERT_TRUE(bool(bytes));
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"w.a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\\\"q\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[8,12]}}";
  header.append((8 - header.size() % 8) % 8, ' ');
  ASSERT_EQ(bytes->size(), 8 + header.size() + 12);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t((*bytes)[i])) << (8 * i);
  EXPECT_EQ(n, header.size());
  EXPECT_EQ(bytes->substr(8, n), header);
  float data[3];
  std::memcpy(data, bytes->data() + 8 + n, 12);
  EXPECT_EQ(data[0], 1.0f);
  EXPECT_EQ(data[1], -2.0f);
  EXPECT_EQ(data[2], 0.5f);

  std::string dir = tempDir();
  ASSERT_FALSE(bool(writeFileAtomically(join(dir, "t.safetensors"), *bytes)));
  auto back = readSafetensors(join(dir, "t.safetensors"));
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].name, "b\"q");
  EXPECT_EQ((*back)[1].tensor.shape(), Shape({1, 1}));
  EXPECT_EQ((*back)[1].tensor.data<float>()[0], 0.5f);
  EXPECT_FALSE(bool(serializeSafetensors({{"__metadata__", a}}, {})));
}

} // namespace
} // namespace megac
