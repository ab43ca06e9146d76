// megac export --hf: shard sizes and cuts as save_pretrained makes them, the
// Hugging Face names from a checkpoint's record, config.json's dtype, and
// whole exports of small checkpoints read back (names, bytes, bf16 rounding,
// the output directory's rules).
#include "CheckpointOfTensors.h"

#include "runtime/core/Safetensors.h"
#include "runtime/core/TensorFile.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/weights/HfExport.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

using namespace megac;
using namespace megac::runtime;

namespace {

std::string tempDir(const std::string &name) {
  llvm::SmallString<256> d;
  EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("megac-" + name, d));
  return std::string(d);
}

std::string join(const std::string &a, const std::string &b) { return a + "/" + b; }

void writeFile(const std::string &path, const std::string &bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string readFile(const std::string &path) {
  auto b = llvm::MemoryBuffer::getFile(path, false, false);
  EXPECT_TRUE(bool(b)) << path;
  return b ? (*b)->getBuffer().str() : std::string();
}

template <typename T> std::string errorOf(llvm::Expected<T> e) {
  return e ? std::string("(no error)") : llvm::toString(e.takeError());
}

Tensor patterned(const Shape &shape, float base) {
  Tensor t(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = base + 0.001f * float(i % 997) + 1e-9f * float(i);
  return t;
}

// A checkpoint of `params` through the trainer's writer, recording `source`
// and the parameter -> tensor names as a run with --weights does.
void writeCheckpoint(const std::string &dir, const std::vector<NamedTensor> &params, const std::string &source,
                     const std::vector<std::pair<std::string, std::string>> &names) {
  auto [plan, state] = megac::testing::planAndStateOf(params, "model.onnx", 3, 5, -7.0f);
  CheckpointInfo info;
  info.step = 4;
  info.weightsSource = source;
  info.weightNames = names;
  ASSERT_FALSE(bool(saveCheckpoint(dir, plan, state, info)));
}

const char *kConfig = "{\n  \"architectures\": [\"X\"],\n  \"dtype\": \"bfloat16\",\n  \"rms_norm_eps\": 1e-05\n}\n";

// A Hugging Face directory: config, a tokenizer, a README (not copied) and
// the weights of a tiny two-tensor model, plus a checkpoint trained from it.
struct Fixture {
  std::string root, hf, ckpt;
  std::vector<NamedTensor> params = {{"m.model.embed_tokens.weight", patterned({6, 4}, 0.5f)},
                                     {"m.model.norm.weight", patterned({4}, 1.0f)},
                                     {"m.lm_head.weight", patterned({6, 4}, -0.25f)}};
  Fixture() {
    root = tempDir("hfexport");
    hf = join(root, "hf");
    ckpt = join(root, "ckpt");
    llvm::sys::fs::create_directories(hf);
    writeFile(join(hf, "config.json"), kConfig);
    writeFile(join(hf, "tokenizer.json"), "{\"model\": {}}");
    writeFile(join(hf, "generation_config.json"), "{}");
    writeFile(join(hf, "README.md"), "# not copied");
    std::vector<NamedTensor> weights;
    for (const NamedTensor &p : params) weights.push_back({p.name.substr(2), p.tensor});
    EXPECT_FALSE(bool(writeSafetensors(join(hf, "model.safetensors"), weights)));
    std::vector<std::pair<std::string, std::string>> names;
    for (const NamedTensor &p : params) names.push_back({p.name, p.name.substr(2)});
    writeCheckpoint(ckpt, params, hf, names);
  }
  // Another checkpoint of `params` (a new directory), now f.ckpt.
  void rewrite(const std::string &source, const std::vector<std::pair<std::string, std::string>> &names) {
    ckpt = join(root, "ckpt" + std::to_string(++rewrites));
    writeCheckpoint(ckpt, params, source, names);
  }
  int rewrites = 0;
  HfExportOptions options(const std::string &out) const {
    HfExportOptions o;
    o.checkpoint = ckpt;
    o.outDir = out;
    return o;
  }
};

llvm::Expected<std::string> exportTo(const HfExportOptions &o) {
  auto plan = planHfExport(o);
  if (!plan) return plan.takeError();
  return writeHfExport(*plan);
}

} // namespace

TEST(HfExport, ShardSizesAsSavePretrainedSpellsThem) {
  EXPECT_EQ(*parseShardSize("5GB"), 5000000000ull);
  EXPECT_EQ(*parseShardSize("500MB"), 500000000ull);
  EXPECT_EQ(*parseShardSize("100KB"), 100000ull);
  EXPECT_EQ(*parseShardSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*parseShardSize("3MIB"), 3ull << 20);
  EXPECT_EQ(*parseShardSize("123"), 123ull);
  EXPECT_NE(errorOf(parseShardSize("5Gb")).find("bits"), std::string::npos);
  EXPECT_NE(errorOf(parseShardSize("0")).find("positive"), std::string::npos);
  EXPECT_NE(errorOf(parseShardSize("5XB")).find("unknown unit"), std::string::npos);
  EXPECT_NE(errorOf(parseShardSize("GB")).find("expected a size"), std::string::npos);
  EXPECT_NE(errorOf(parseShardSize("99999999999TB")).find("too large"), std::string::npos);
}

TEST(HfExport, ShardsAreCutAsSavePretrainedCutsThem) {
  // A tensor past the limit goes alone (before the shard being filled), a
  // tensor that would tip the current shard over starts a new one.
  EXPECT_EQ(splitShards({10, 60, 50, 200, 30}, 100),
            (std::vector<std::vector<size_t>>{{0, 1}, {3}, {2, 4}}));
  EXPECT_EQ(splitShards({100, 1}, 100), (std::vector<std::vector<size_t>>{{0}, {1}}));
  EXPECT_EQ(splitShards({}, 100).size(), 0u);

  // The committed save_pretrained(max_shard_size="100KB") of the tiny llama
  // in bf16: its state dict's order and sizes give its three shards.
  std::vector<std::pair<std::string, uint64_t>> order = {{"model.embed_tokens.weight", 256 * 64}};
  for (int l = 0; l < 2; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    for (auto [n, size] : std::vector<std::pair<const char *, uint64_t>>{{"self_attn.q_proj.weight", 64 * 64},
                                                                          {"self_attn.k_proj.weight", 32 * 64},
                                                                          {"self_attn.v_proj.weight", 32 * 64},
                                                                          {"self_attn.o_proj.weight", 64 * 64},
                                                                          {"mlp.gate_proj.weight", 176 * 64},
                                                                          {"mlp.up_proj.weight", 176 * 64},
                                                                          {"mlp.down_proj.weight", 64 * 176},
                                                                          {"input_layernorm.weight", 64},
                                                                          {"post_attention_layernorm.weight", 64}})
      order.push_back({p + n, size});
  }
  order.push_back({"model.norm.weight", 64});
  order.push_back({"lm_head.weight", 256 * 64});
  std::vector<uint64_t> bytes;
  for (const auto &o : order) bytes.push_back(o.second * 2);
  auto shards = splitShards(bytes, 100000);
  ASSERT_EQ(shards.size(), 3u);
  auto index = llvm::json::parse(readFile(std::string(MEGAC_TEST_DATA) +
                                          "/hf_tiny/llama/bf16_sharded/model.safetensors.index.json"));
  ASSERT_TRUE(bool(index));
  const llvm::json::Object *map = index->getAsObject()->getObject("weight_map");
  ASSERT_TRUE(map);
  EXPECT_EQ(map->size(), order.size());
  for (size_t s = 0; s < shards.size(); ++s)
    for (size_t i : shards[s]) {
      char file[64];
      std::snprintf(file, sizeof file, "model-%05zu-of-00003.safetensors", s + 1);
      EXPECT_EQ(map->getString(order[i].first).getValueOr("").str(), file) << order[i].first;
    }
}

TEST(HfExport, NamesFromTheRecordedSource) {
  std::string how;
  // Recorded at load: the Hugging Face names, whatever the graph called them
  // (the tied parameter took the checkpoint's lm_head.weight).
  auto n = hfNames({"m.model.embed_tokens.weight", "m.model.norm.weight"},
                   {{"m.model.embed_tokens.weight", "lm_head.weight"}, {"m.model.norm.weight", "model.norm.weight"}},
                   how);
  ASSERT_TRUE(bool(n)) << llvm::toString(n.takeError());
  EXPECT_EQ(*n, (std::vector<std::string>{"lm_head.weight", "model.norm.weight"}));
  EXPECT_EQ(how, "the names recorded at load");

  // A parameter --init-missing filled takes the rewrite the others share.
  how.clear();
  n = hfNames({"m.a.x", "m.a.y", "m.b"}, {{"m.a.x", "a.x"}, {"m.b", "b"}}, how);
  ASSERT_TRUE(bool(n)) << llvm::toString(n.takeError());
  EXPECT_EQ(*n, (std::vector<std::string>{"a.x", "a.y", "b"}));
  EXPECT_NE(how.find("1 parameters that took no tensor (--init-missing) named as the others: the prefix 'm.' removed"),
            std::string::npos)
      << how;
  // ... or a prefix the checkpoint adds (a base model's graph).
  n = hfNames({"layers.0.w", "norm.w"}, {{"layers.0.w", "model.layers.0.w"}}, how);
  ASSERT_TRUE(bool(n));
  EXPECT_EQ((*n)[1], "model.norm.w");
  EXPECT_NE(errorOf(hfNames({"m.a.w", "zzz"}, {{"m.a.w", "a.w"}}, how)).find("cannot be told from the others'"),
            std::string::npos);
}

TEST(HfExport, NamesWithoutARecord) {
  std::string how;
  // Every name under the export wrapper's 'm.': removed.
  auto n = hfNames({"m.model.norm.weight", "m.lm_head.weight"}, {}, how);
  ASSERT_TRUE(bool(n));
  EXPECT_EQ(*n, (std::vector<std::string>{"model.norm.weight", "lm_head.weight"}));
  EXPECT_EQ(how, "the parameters' own names, with the export wrapper's prefix 'm.' removed");
  // Names without it are kept.
  how.clear();
  n = hfNames({"model.norm.weight", "m.lm_head.weight"}, {}, how);
  ASSERT_TRUE(bool(n));
  EXPECT_EQ((*n)[1], "m.lm_head.weight");
  // An optimized export: an error that says why and what to do.
  std::string e = errorOf(hfNames({"m.model.norm.weight", "val_93", "val_100"}, {}, how));
  EXPECT_NE(e.find("2 of the 3 parameters have names the ONNX exporter generated ('val_93', 'val_100')"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("tools/export_shapes_only.py"), std::string::npos) << e;
  // Weights read from an optimized ONNX file: its generated names were recorded.
  e = errorOf(hfNames({"val_1"}, {{"val_1", "val_1"}}, how));
  EXPECT_NE(e.find("the weights came from an optimized ONNX export"), std::string::npos) << e;
  // Two parameters, one name.
  e = errorOf(hfNames({"m.a", "a"}, {{"m.a", "a"}, {"a", "a"}}, how));
  EXPECT_NE(e.find("parameters 'm.a' and 'a' would both be written as 'a'"), std::string::npos) << e;
}

TEST(HfExport, ConfigDTypeFollowsWhatIsWritten) {
  std::string was;
  EXPECT_EQ(setConfigDType(kConfig, "float32", was),
            "{\n  \"architectures\": [\"X\"],\n  \"dtype\": \"float32\",\n  \"rms_norm_eps\": 1e-05\n}\n");
  EXPECT_EQ(was, "bfloat16");
  EXPECT_EQ(setConfigDType(kConfig, "bfloat16", was), kConfig);
  EXPECT_EQ(was, "");
  EXPECT_EQ(setConfigDType("{\"torch_dtype\" : \"float16\", \"text_config\": {\"dtype\": \"float16\"}}", "float32", was),
            "{\"torch_dtype\" : \"float32\", \"text_config\": {\"dtype\": \"float32\"}}");
  EXPECT_EQ(was, "float16");
  EXPECT_EQ(setConfigDType("{\"dtype\": \"auto\"}", "float32", was), "{\"dtype\": \"auto\"}");
}

TEST(HfExport, WritesWhatFromPretrainedReads) {
  Fixture f;
  std::string out = join(f.root, "out");
  auto wrote = exportTo(f.options(out));
  ASSERT_TRUE(bool(wrote)) << llvm::toString(wrote.takeError());
  EXPECT_NE(wrote->find("3 tensors, 52 parameters, F32, 208 bytes in model.safetensors; 3 configuration files"),
            std::string::npos)
      << *wrote;
  auto h = readSafetensorsHeader(join(out, "model.safetensors"));
  ASSERT_TRUE(bool(h)) << llvm::toString(h.takeError());
  EXPECT_EQ(h->metadata.at("format"), "pt");
  auto t = readSafetensors(join(out, "model.safetensors"));
  ASSERT_TRUE(bool(t));
  ASSERT_EQ(t->size(), 3u);
  // In name order, as the safetensors library writes them; bytes as trained.
  EXPECT_EQ((*t)[0].name, "lm_head.weight");
  EXPECT_EQ((*t)[1].name, "model.embed_tokens.weight");
  EXPECT_EQ((*t)[2].name, "model.norm.weight");
  EXPECT_EQ((*t)[1].tensor.shape(), Shape({6, 4}));
  EXPECT_EQ(std::memcmp((*t)[0].tensor.raw(), f.params[2].tensor.raw(), f.params[2].tensor.nbytes()), 0);
  EXPECT_EQ(std::memcmp((*t)[1].tensor.raw(), f.params[0].tensor.raw(), f.params[0].tensor.nbytes()), 0);
  // Configuration copied (dtype now what is written), the README not.
  std::string was;
  EXPECT_EQ(readFile(join(out, "config.json")), setConfigDType(kConfig, "float32", was));
  EXPECT_EQ(was, "bfloat16");
  EXPECT_EQ(readFile(join(out, "tokenizer.json")), "{\"model\": {}}");
  EXPECT_TRUE(llvm::sys::fs::exists(join(out, "generation_config.json")));
  EXPECT_FALSE(llvm::sys::fs::exists(join(out, "README.md")));
  EXPECT_FALSE(llvm::sys::fs::exists(join(out, "model.safetensors.index.json")));
  // Nothing left beside it.
  std::error_code ec;
  int entries = 0;
  for (llvm::sys::fs::directory_iterator it(f.root, ec), end; it != end && !ec; it.increment(ec)) ++entries;
  EXPECT_EQ(entries, 3); // hf, ckpt, out
}

TEST(HfExport, Bf16ShardsRoundToNearestEven) {
  Fixture f;
  // Values on both sides of a bf16 halfway point, ties to even both ways.
  float *e = f.params[0].tensor.data<float>();
  uint32_t bits[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu};
  for (int i = 0; i < 4; ++i) std::memcpy(&e[i], &bits[i], 4);
  f.rewrite(f.hf, {});
  std::string out = join(f.root, "bf16");
  HfExportOptions o = f.options(out);
  o.dtype = DType::BF16;
  o.maxShardBytes = 48; // 24 elements of bf16: one tensor a shard
  auto wrote = exportTo(o);
  ASSERT_TRUE(bool(wrote)) << llvm::toString(wrote.takeError());
  EXPECT_NE(wrote->find("BF16, 104 bytes in 3 shards and model.safetensors.index.json"), std::string::npos) << *wrote;
  auto s1 = readSafetensors(join(out, "model-00001-of-00003.safetensors"));
  ASSERT_TRUE(bool(s1)) << llvm::toString(s1.takeError());
  ASSERT_EQ(s1->size(), 1u);
  EXPECT_EQ((*s1)[0].name, "model.embed_tokens.weight");
  EXPECT_EQ((*s1)[0].tensor.dtype(), DType::BF16);
  const uint16_t *b = static_cast<const uint16_t *>((*s1)[0].tensor.raw());
  EXPECT_EQ(b[0], 0x3f80); // tie, even below
  EXPECT_EQ(b[1], 0x3f82); // tie, even above
  EXPECT_EQ(b[2], 0x3f81); // past the tie
  EXPECT_EQ(b[3], 0x3f80); // short of it
  auto index = llvm::json::parse(readFile(join(out, "model.safetensors.index.json")));
  ASSERT_TRUE(bool(index));
  const llvm::json::Object *meta = index->getAsObject()->getObject("metadata");
  EXPECT_EQ(meta->getInteger("total_size").getValueOr(0), 104);
  EXPECT_EQ(meta->getInteger("total_parameters").getValueOr(0), 52);
  EXPECT_EQ(index->getAsObject()->getObject("weight_map")->getString("model.norm.weight").getValueOr("").str(),
            "model-00002-of-00003.safetensors");
  EXPECT_NE(readFile(join(out, "config.json")).find("\"dtype\": \"bfloat16\""), std::string::npos);
}

TEST(HfExport, TheOutputDirectoryIsNewEmptyOrAPreviousExport) {
  Fixture f;
  std::string out = join(f.root, "out");
  // An empty directory is taken.
  llvm::sys::fs::create_directories(out);
  ASSERT_TRUE(bool(exportTo(f.options(out))));
  // A previous export is replaced: one shard file becomes three.
  HfExportOptions o = f.options(out);
  o.maxShardBytes = 96;
  auto again = exportTo(o);
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_NE(again->find("(replaced the previous export)"), std::string::npos);
  EXPECT_FALSE(llvm::sys::fs::exists(join(out, "model.safetensors")));
  EXPECT_TRUE(llvm::sys::fs::exists(join(out, "model-00003-of-00003.safetensors")));
  // The Hugging Face directory itself is not an export: refused, untouched.
  std::string before = readFile(join(f.hf, "model.safetensors"));
  std::string e = errorOf(exportTo(f.options(f.hf)));
  EXPECT_NE(e.find(": exists and is not empty, and is not a previous megac export (it holds 'README.md')"),
            std::string::npos)
      << e;
  llvm::sys::fs::remove(join(f.hf, "README.md"));
  e = errorOf(exportTo(f.options(f.hf)));
  EXPECT_NE(e.find("'model.safetensors' was not written by megac"), std::string::npos) << e;
  EXPECT_EQ(readFile(join(f.hf, "model.safetensors")), before);
  // A file in the way.
  writeFile(join(f.root, "file"), "x");
  EXPECT_NE(errorOf(exportTo(f.options(join(f.root, "file")))).find("exists and is not a directory"), std::string::npos);
}

TEST(HfExport, ConfigComesFromTheSourceOrHfConfig) {
  Fixture f;
  // No source recorded: names from the parameters, config only with --hf-config.
  f.rewrite("", {});
  std::string e = errorOf(exportTo(f.options(join(f.root, "a"))));
  EXPECT_NE(e.find("no Hugging Face configuration to export with: its weights came from the model file, not from a "
                   "Hugging Face directory. from_pretrained needs config.json: pass --hf-config DIR"),
            std::string::npos)
      << e;
  HfExportOptions o = f.options(join(f.root, "a"));
  o.configDir = f.hf;
  auto plan = planHfExport(o);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->tensors[0].name, "model.embed_tokens.weight");
  EXPECT_NE(plan->report[0].find("the parameters' own names, with the export wrapper's prefix 'm.' removed"),
            std::string::npos);
  // A --hf-config without config.json.
  llvm::sys::fs::remove(join(f.hf, "config.json"));
  e = errorOf(planHfExport(o));
  EXPECT_NE(e.find(": no config.json (from_pretrained needs it)"), std::string::npos) << e;
  // The source gone.
  f.rewrite(join(f.root, "gone"), {{"m.model.norm.weight", "model.norm.weight"}});
  e = errorOf(planHfExport(f.options(join(f.root, "a"))));
  EXPECT_NE(e.find("the weights' source " + join(f.root, "gone") + " is not there"), std::string::npos) << e;
}

TEST(HfExport, ARunFromAnotherRunsCheckpointKeepsTheHuggingFaceNames) {
  Fixture f;
  // A second run whose --weights was the first run's checkpoint, with names
  // of its own for the same parameters: the record is followed back.
  std::vector<NamedTensor> renamed = {{"p0", f.params[0].tensor}, {"p1", f.params[1].tensor}, {"p2", f.params[2].tensor}};
  std::string second = join(f.root, "second");
  writeCheckpoint(second, renamed, f.ckpt,
                  {{"p0", "m.model.embed_tokens.weight"}, {"p1", "m.model.norm.weight"}, {"p2", "m.lm_head.weight"}});
  HfExportOptions o = f.options(join(f.root, "out"));
  o.checkpoint = second;
  auto plan = planHfExport(o);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->tensors[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(plan->tensors[2].name, "lm_head.weight");
  EXPECT_EQ(plan->configDir, f.hf);
}

TEST(HfExport, DivergedWeightsAreRefused) {
  Fixture f;
  f.params[1].tensor.data<float>()[2] = std::nanf("");
  f.rewrite(f.hf, {});
  std::string e = errorOf(planHfExport(f.options(join(f.root, "out"))));
  EXPECT_NE(e.find("parameter 'm.model.norm.weight' holds nan at element 2"), std::string::npos) << e;
}
