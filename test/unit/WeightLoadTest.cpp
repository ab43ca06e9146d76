// Pretrained weights: the safetensors header checks, the name matching
// (exact, a detected prefix on either side, a tied embedding and head, and
// the errors), and a sharded checkpoint read through the index.
#include "runtime/core/Safetensors.h"
#include "runtime/train/NameMatch.h"
#include "runtime/weights/WeightFiles.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <fstream>

using namespace megac;
using namespace megac::runtime;

namespace {

std::string tempDir(const std::string &name) {
  llvm::SmallString<256> d;
  llvm::sys::fs::createUniqueDirectory("megac-" + name, d);
  return std::string(d);
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A safetensors file with one header `json` and `body` bytes of data.
std::string rawSafetensors(const std::string &json, size_t body) {
  std::string out;
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  return out + json + std::string(body, '\0');
}

template <typename T> std::string errorOf(llvm::Expected<T> e) {
  return e ? std::string("(no error)") : llvm::toString(e.takeError());
}

} // namespace

TEST(SafetensorsHeader, LyingSizesAreRefusedBeforeAllocation) {
  std::string dir = tempDir("st");
  auto check = [&](const std::string &json, size_t body, const std::string &expect) {
    std::string p = dir + "/t.safetensors";
    writeFile(p, rawSafetensors(json, body));
    std::string e = errorOf(readSafetensorsHeader(p));
    EXPECT_NE(e.find(expect), std::string::npos) << json << " -> " << e;
  };
  // A shape of 2^62 x 8 elements whose product wraps: refused, nothing allocated.
  check(R"({"w":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,256]}})", 256, "more than 2^63");
  // Offsets that claim more data than the file has.
  check(R"({"w":{"dtype":"F32","shape":[1024,1024],"data_offsets":[0,4194304]}})", 64, "lie past the end");
  // Offsets that disagree with the shape.
  check(R"({"w":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,64]}})", 64, "needs 32");
  check(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "bad shape");
  check(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
        24, "overlap");
  check(R"({"w":{"dtype":"Q4","shape":[4],"data_offsets":[0,4]}})", 4, "unsupported dtype Q4");
  // A header length past the end of the file, and a file shorter than the length field.
  std::string p = dir + "/short.safetensors";
  writeFile(p, std::string("\xff\xff\xff\xff\x00\x00\x00\x00{}", 10));
  EXPECT_NE(errorOf(readSafetensorsHeader(p)).find("its header length is 4294967295 bytes, the file has 10"),
            std::string::npos);
  writeFile(p, "abc");
  EXPECT_NE(errorOf(readSafetensorsHeader(p)).find("shorter than its 8-byte header length"), std::string::npos);
  llvm::sys::fs::remove_directories(dir);
}

TEST(SafetensorsHeader, ReadsWhatWriteSafetensorsWrote) {
  std::string dir = tempDir("st");
  Tensor a(DType::F32, {2, 3}), b(DType::BF16, {4});
  for (int i = 0; i < 6; ++i) a.data<float>()[i] = float(i);
  ASSERT_FALSE(bool(writeSafetensors(dir + "/m.safetensors", {{"x.a", a}, {"x.b", b}})));
  auto h = readSafetensorsHeader(dir + "/m.safetensors");
  ASSERT_TRUE(bool(h)) << llvm::toString(h.takeError());
  ASSERT_EQ(h->entries.size(), 2u);
  EXPECT_EQ(h->entries[0].name, "x.a");
  EXPECT_EQ(h->entries[0].shape, Shape({2, 3}));
  EXPECT_EQ(h->entries[1].dtype, DType::BF16);
  EXPECT_EQ(h->entries[1].end - h->entries[1].begin, 8u);
  EXPECT_EQ(h->metadata.at("format"), "pt");
  llvm::sys::fs::remove_directories(dir);
}

namespace {

std::vector<WantedTensor> llamaGraph(const std::string &prefix, bool tied) {
  std::vector<WantedTensor> w = {{prefix + "model.embed_tokens.weight", {256, 64}, tied},
                                 {prefix + "model.layers.0.self_attn.q_proj.weight", {64, 64}},
                                 {prefix + "model.layers.0.mlp.up_proj.weight", {176, 64}},
                                 {prefix + "model.norm.weight", {64}}};
  if (!tied) w.push_back({prefix + "lm_head.weight", {256, 64}});
  return w;
}

std::vector<OfferedTensor> hfCheckpoint(bool withHead) {
  std::vector<OfferedTensor> o = {{"model.norm.weight", {64}, "BF16"},
                                  {"model.layers.0.mlp.up_proj.weight", {176, 64}, "BF16"},
                                  {"model.embed_tokens.weight", {256, 64}, "BF16"},
                                  {"model.layers.0.self_attn.q_proj.weight", {64, 64}, "BF16"}};
  if (withHead) o.push_back({"lm_head.weight", {256, 64}, "BF16"});
  return o;
}

NameMatchOptions opts(bool allowMissing = false) {
  NameMatchOptions o;
  o.graphLabel = "model.onnx";
  o.sourceLabel = "ckpt";
  o.allowMissing = allowMissing;
  return o;
}

} // namespace

TEST(NameMatch, DetectsTheWrappersPrefix) {
  auto m = matchWeightNames(llamaGraph("m.", false), hfCheckpoint(true), opts());
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  EXPECT_EQ(m->prefix, "m.");
  EXPECT_TRUE(m->prefixOnGraph);
  EXPECT_EQ(m->matched, 5);
  EXPECT_EQ(m->source, (std::vector<int32_t>{2, 3, 1, 0, 4}));
  ASSERT_FALSE(m->notes.empty());
  EXPECT_NE(m->notes[0].find("removing the prefix 'm.' from model.onnx's names"), std::string::npos);
}

TEST(NameMatch, ExactNamesNeedNoPrefix) {
  auto m = matchWeightNames(llamaGraph("", false), hfCheckpoint(true), opts());
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  EXPECT_EQ(m->prefix, "");
  EXPECT_EQ(m->matched, 5);
  EXPECT_TRUE(m->notes.empty());
}

TEST(NameMatch, APrefixOnTheCheckpointsSide) {
  std::vector<OfferedTensor> o = hfCheckpoint(true);
  for (auto &t : o) t.name = "base." + t.name;
  auto m = matchWeightNames(llamaGraph("", false), o, opts());
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  EXPECT_EQ(m->prefix, "base.");
  EXPECT_FALSE(m->prefixOnGraph);
  EXPECT_EQ(m->matched, 5);
}

TEST(NameMatch, TiedHeadTakesTheEmbeddingUnderEitherName) {
  // The graph names the tied tensor after the head; the checkpoint after the embedding.
  std::vector<WantedTensor> g = llamaGraph("m.", true);
  g[0].name = "m.lm_head.weight";
  auto m = matchWeightNames(g, hfCheckpoint(false), opts());
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  EXPECT_EQ(m->matched, 4);
  EXPECT_EQ(m->source[0], 2);
  bool said = false;
  for (const auto &n : m->notes) said |= n.find("tied embedding and head; it takes 'model.embed_tokens.weight'") != std::string::npos;
  EXPECT_TRUE(said);
  // An untied parameter never takes another name's tensor.
  g[0].tiedEmbeddingHead = false;
  std::string e = errorOf(matchWeightNames(g, hfCheckpoint(false), opts()));
  EXPECT_NE(e.find("1 of the 4 parameters of model.onnx have no tensor"), std::string::npos) << e;
}

TEST(NameMatch, ACheckpointWithAnUntiedHeadIntoATiedGraphWarns) {
  auto m = matchWeightNames(llamaGraph("m.", true), hfCheckpoint(true), opts());
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  bool warned = false;
  for (const auto &n : m->notes) warned |= n.find("warning: the graph ties its embedding and head") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST(NameMatch, MissingParametersListBothSides) {
  std::vector<OfferedTensor> o = hfCheckpoint(true);
  o[1].name = "model.layers.0.mlp.w_up.weight";
  std::string e = errorOf(matchWeightNames(llamaGraph("m.", false), o, opts()));
  EXPECT_NE(e.find("ckpt: 1 of the 5 parameters of model.onnx have no tensor in the weights (names compared after "
                   "removing the prefix 'm.' from model.onnx's names)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("parameters without a tensor (1):\n    m.model.layers.0.mlp.up_proj.weight [176,64]"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("tensors of the weights without a parameter (1):\n    model.layers.0.mlp.w_up.weight [176,64] BF16"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("pass --init-missing"), std::string::npos) << e;
  // --init-missing: matched, with the missing one listed.
  auto m = matchWeightNames(llamaGraph("m.", false), o, opts(true));
  ASSERT_TRUE(bool(m));
  EXPECT_EQ(m->missing, std::vector<int32_t>{2});
  EXPECT_EQ(m->matched, 4);
}

TEST(NameMatch, NothingMatchedIsAnErrorEvenWithInitMissing) {
  std::vector<OfferedTensor> o = {{"transformer.h.0.attn.c_attn.weight", {64, 192}, "F32"}};
  std::string e = errorOf(matchWeightNames(llamaGraph("m.", false), o, opts(true)));
  EXPECT_NE(e.find("none of its 1 tensors matches one of the 5 parameters of model.onnx"), std::string::npos) << e;
  EXPECT_EQ(e.find("--init-missing"), std::string::npos) << e;
}

TEST(NameMatch, ShapeMismatchNamesBothTensors) {
  std::vector<OfferedTensor> o = hfCheckpoint(true);
  o[1].shape = {64, 176};
  std::string e = errorOf(matchWeightNames(llamaGraph("m.", false), o, opts()));
  EXPECT_NE(e.find("'m.model.layers.0.mlp.up_proj.weight' is [176,64] in model.onnx, "
                   "'model.layers.0.mlp.up_proj.weight' is [64,176] in ckpt (transposed)"),
            std::string::npos)
      << e;
}

TEST(NameMatch, ExporterGeneratedNamesPointToTheRecipe) {
  // What torch.onnx.export(dynamo=True) writes by default: val_N, Linear weights [in, out].
  std::vector<WantedTensor> g = {{"model.embed_tokens.weight", {256, 64}},
                                 {"val_93", {64, 176}},
                                 {"model.norm.weight", {64}}};
  std::vector<OfferedTensor> o = {{"model.embed_tokens.weight", {256, 64}, "F32"},
                                  {"model.layers.0.mlp.up_proj.weight", {176, 64}, "F32"},
                                  {"model.norm.weight", {64}, "F32"}};
  std::string e = errorOf(matchWeightNames(g, o, opts()));
  EXPECT_NE(e.find("names parameters as the exporter generated them (e.g. 'val_93')"), std::string::npos) << e;
  EXPECT_NE(e.find("hint: 1 of the parameters without a tensor have the transposed shape"), std::string::npos) << e;
}

TEST(WeightSource, ShardedIndexReadsEachTensorFromItsShard) {
  std::string dir = tempDir("hf");
  Tensor a(DType::F32, {3}), b(DType::BF16, {2}), c(DType::F16, {2});
  a.data<float>()[0] = 1.5f, a.data<float>()[1] = -2.0f, a.data<float>()[2] = 3.25f;
  b.data<uint16_t>()[0] = 0x3fc0, b.data<uint16_t>()[1] = 0xc040; // 1.5, -3.0
  c.data<uint16_t>()[0] = 0x3c00, c.data<uint16_t>()[1] = 0xc400; // 1.0, -4.0
  ASSERT_FALSE(bool(writeSafetensors(dir + "/model-00001-of-00002.safetensors", {{"a", a}, {"b", b}})));
  ASSERT_FALSE(bool(writeSafetensors(dir + "/model-00002-of-00002.safetensors", {{"c", c}})));
  writeFile(dir + "/model.safetensors.index.json",
            R"({"metadata":{"total_size":24},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
            R"("b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})");
  auto kind = classifyWeightsPath(dir);
  ASSERT_TRUE(bool(kind));
  EXPECT_EQ(kind->format, WeightFormat::Safetensors);
  auto src = openWeightSource(dir);
  ASSERT_TRUE(bool(src)) << llvm::toString(src.takeError());
  EXPECT_EQ((*src)->files.size(), 2u);
  EXPECT_EQ((*src)->describe(), "safetensors, 2 files, BF16/F16/F32");
  std::vector<float> out(7, 0.0f);
  std::vector<std::pair<int32_t, float *>> wanted;
  for (size_t i = 0, off = 0; i < (*src)->tensors.size(); off += size_t((*src)->tensors[i].numel), ++i)
    wanted.push_back({int32_t(i), out.data() + off});
  WeightReadStats stats;
  ASSERT_FALSE(bool((*src)->read(wanted, stats)));
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.0f, 3.25f, 1.5f, -3.0f, 1.0f, -4.0f}));
  EXPECT_EQ(stats.files, 2);
  EXPECT_EQ(stats.bytes, 12 + 4 + 4);
  llvm::sys::fs::remove_directories(dir);
}

TEST(WeightSource, ShardNamesStayInsideTheIndexDirectory) {
  std::string dir = tempDir("hf"), outside = tempDir("outside");
  Tensor a(DType::F32, {1});
  ASSERT_FALSE(bool(writeSafetensors(outside + "/evil.safetensors", {{"a", a}})));
  writeFile(dir + "/model.safetensors.index.json", R"({"weight_map":{"a":"../)" +
                                                       std::string(llvm::sys::path::filename(outside)) +
                                                       R"(/evil.safetensors"}})");
  EXPECT_NE(errorOf(openWeightSource(dir)).find("which is not a file inside the index's directory"), std::string::npos);
  // A link inside the directory that resolves outside it.
  ASSERT_FALSE(llvm::sys::fs::create_link(outside + "/evil.safetensors", dir + "/shard.safetensors"));
  writeFile(dir + "/model.safetensors.index.json", R"({"weight_map":{"a":"shard.safetensors"}})");
  std::string e = errorOf(openWeightSource(dir));
  EXPECT_NE(e.find("resolves to " + outside), std::string::npos) << e;
  llvm::sys::fs::remove_directories(dir);
  llvm::sys::fs::remove_directories(outside);
}

TEST(WeightSource, HuggingFaceCacheLinksIntoItsBlobs) {
  // models--org--name/snapshots/REV/model.safetensors -> ../../blobs/HASH
  std::string root = tempDir("cache"), model = root + "/models--org--tiny";
  ASSERT_FALSE(llvm::sys::fs::create_directories(model + "/snapshots/abc123"));
  ASSERT_FALSE(llvm::sys::fs::create_directories(model + "/blobs"));
  Tensor a(DType::F32, {2});
  ASSERT_FALSE(bool(writeSafetensors(model + "/blobs/0f1e2d", {{"a", a}})));
  ASSERT_FALSE(llvm::sys::fs::create_link("../../blobs/0f1e2d", model + "/snapshots/abc123/model-1.safetensors"));
  writeFile(model + "/snapshots/abc123/model.safetensors.index.json", R"({"weight_map":{"a":"model-1.safetensors"}})");
  auto src = openWeightSource(model + "/snapshots/abc123");
  EXPECT_TRUE(bool(src)) << errorOf(std::move(src));
  llvm::sys::fs::remove_directories(root);
}

TEST(WeightSource, AmbiguousAndEmptyDirectories) {
  std::string dir = tempDir("amb");
  EXPECT_NE(errorOf(classifyWeightsPath(dir)).find("holds neither Hugging Face weights"), std::string::npos);
  Tensor a(DType::F32, {1});
  ASSERT_FALSE(bool(writeSafetensors(dir + "/model.safetensors", {{"a", a}})));
  EXPECT_EQ(classifyWeightsPath(dir)->format, WeightFormat::Safetensors);
  writeFile(dir + "/latest", "step-00000001\n");
  EXPECT_NE(errorOf(classifyWeightsPath(dir)).find("--weights is ambiguous"), std::string::npos);
  llvm::sys::fs::remove_directories(dir);
}
