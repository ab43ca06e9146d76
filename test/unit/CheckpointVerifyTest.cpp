// Checkpoint format 2: checksums of the meta and the arrays, values checked
// on load (finite; adam_v >= 0), `latest` kept inside its directory, format 1
// still read, and the writer's bookkeeping (the step `latest` names survives,
// a step written again is replaced whole, leftovers of killed writes go).
#include "FixtureTestUtil.h"

#include "runtime/core/TensorFile.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/CheckpointWeights.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/xxhash.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace megac {
namespace {

namespace fs = llvm::sys::fs;

std::string tempDir() {
  llvm::SmallString<128> dir;
  EXPECT_FALSE(fs::createUniqueDirectory("megac-ckpt-verify", dir));
  return std::string(dir);
}

std::string join(const std::string &a, const std::string &b) { return a + "/" + b; }

// Two parameters with a gap between them: 'a' [4,8] at 0, 'b' [3,5] at 40.
struct Model {
  plan::Plan plan;
  runtime::HostState state;
};

Model makeModel() {
  Model m;
  auto add = [&](const char *name, std::vector<int64_t> shape, int64_t offset) {
    auto *p = m.plan.add_parameters();
    p->set_name(name);
    int64_t n = 1;
    for (int64_t d : shape) {
      p->mutable_type()->add_shape(d);
      n *= d;
    }
    p->set_numel(n);
    p->set_host_offset(offset);
  };
  add("a", {4, 8}, 0);
  add("b", {3, 5}, 40);
  m.plan.set_model_path("model.onnx");
  const size_t n = 64;
  m.state.params.resize(n);
  m.state.m.resize(n);
  m.state.v.resize(n);
  for (size_t i = 0; i < n; ++i) {
    m.state.params[i] = 0.01f * float(i) - 0.3f;
    m.state.m[i] = 0.001f * float(i % 7) - 0.002f;
    m.state.v[i] = 1e-6f * float(i % 5);
  }
  return m;
}

runtime::HostState emptyLike(const runtime::HostState &s) {
  runtime::HostState e;
  e.params.assign(s.params.size(), 0.0f);
  e.m.assign(s.m.size(), 0.0f);
  e.v.assign(s.v.size(), 0.0f);
  return e;
}

void save(const std::string &dir, const Model &m, int64_t step, int keep = 2) {
  runtime::CheckpointInfo info;
  info.step = step;
  info.totalSteps = 100;
  info.seed = 7;
  info.dataIndex = step * 2;
  ASSERT_FALSE(bool(runtime::saveCheckpoint(dir, m.plan, m.state, info, keep)));
}

// The error of loading dir into a fresh state (empty: it loaded).
std::string loadError(const std::string &dir, const Model &m) {
  runtime::HostState s = emptyLike(m.state);
  auto r = runtime::loadCheckpoint(dir, m.plan, s);
  return r ? std::string() : llvm::toString(r.takeError());
}

void flipByte(const std::string &path, size_t at) {
  std::string bytes = testing::readFile(path);
  ASSERT_LT(at, bytes.size());
  bytes[at] ^= 0x10;
  ASSERT_FALSE(bool(writeFileAtomically(path, bytes)));
}

void setFloat(const std::string &path, int64_t index, float x) {
  std::string bytes = testing::readFile(path);
  std::memcpy(&bytes[size_t(index) * 4], &x, 4);
  ASSERT_FALSE(bool(writeFileAtomically(path, bytes)));
}

// Rewrites a step directory's meta as format 1: no header, no checksums.
void toFormat1(const std::string &stepDir) {
  std::string path = join(stepDir, "checkpoint.meta");
  auto meta = runtime::decodeCheckpointMeta(testing::readFile(path), path);
  ASSERT_TRUE(bool(meta));
  meta->set_format_version(1);
  meta->clear_checksums();
  meta->clear_checksum_chunk_bytes();
  ASSERT_FALSE(bool(writeFileAtomically(path, "MEGACCKP" + meta->SerializeAsString())));
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(CheckpointVerify, RoundTripIsExactAndRecordsChecksums) {
  std::string dir = tempDir();
  Model m = makeModel();
  save(dir, m, 3);
  runtime::HostState s = emptyLike(m.state);
  auto info = runtime::loadCheckpoint(dir, m.plan, s);
  ASSERT_TRUE(bool(info)) << llvm::toString(info.takeError());
  EXPECT_EQ(info->step, 3);
  EXPECT_EQ(info->dataIndex, 6);
  EXPECT_EQ(s.step, 3);
  EXPECT_EQ(0, std::memcmp(s.params.data(), m.state.params.data(), s.params.size() * 4));
  EXPECT_EQ(0, std::memcmp(s.m.data(), m.state.m.data(), s.m.size() * 4));
  EXPECT_EQ(0, std::memcmp(s.v.data(), m.state.v.data(), s.v.size() * 4));
  auto meta = runtime::readCheckpointMeta(join(dir, "step-00000003"));
  ASSERT_TRUE(bool(meta));
  EXPECT_EQ(meta->format_version(), runtime::kCheckpointVersion);
  ASSERT_EQ(meta->checksums_size(), 3);
  EXPECT_GT(meta->checksum_chunk_bytes(), 0u);
  const std::vector<float> *arrays[3] = {&m.state.params, &m.state.m, &m.state.v};
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(meta->checksums(i).xxh64(),
              runtime::checkpointArrayChecksum(reinterpret_cast<const char *>(arrays[i]->data()), arrays[i]->size() * 4,
                                               meta->checksum_chunk_bytes()));
  EXPECT_FALSE(bool(runtime::verifyCheckpointParams(join(dir, "step-00000003"), *meta)));
}

// The array checksum is the xxHash64 of the chunks' xxHash64s, whatever
// the threads: checked against a serial computation, a short last chunk too.
TEST(CheckpointVerify, ArrayChecksumIsTheHashOfTheChunkHashes) {
  EXPECT_EQ(llvm::xxHash64(llvm::StringRef()), 0xef46db3751d8e999ull); // XXH64("", seed 0)
  std::string data(3 * 65536 + 1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 131 + (i >> 9));
  for (uint64_t chunk : {uint64_t(4096), uint64_t(65536), uint64_t(1) << 22}) {
    std::string hashes;
    for (size_t b = 0; b < data.size(); b += chunk) {
      uint64_t h = llvm::xxHash64(llvm::StringRef(data).substr(b, chunk));
      for (int k = 0; k < 8; ++k) hashes.push_back(char(h >> (8 * k)));
    }
    EXPECT_EQ(runtime::checkpointArrayChecksum(data.data(), data.size(), chunk), llvm::xxHash64(hashes)) << chunk;
  }
}

// One changed byte in any array: the error names the file and the array.
TEST(CheckpointVerify, ArrayChecksumMismatchNamesTheFileAndArray) {
  std::string dir = tempDir();
  Model m = makeModel();
  save(dir, m, 1);
  std::string step = join(dir, "step-00000001");
  const std::pair<const char *, const char *> files[] = {{"params.f32", "the parameters (params)"},
                                                         {"adam_m.f32", "AdamW's first moments (adam_m)"},
                                                         {"adam_v.f32", "AdamW's second moments (adam_v)"}};
  for (auto [file, array] : files) {
    std::string path = join(step, file), orig = testing::readFile(path);
    flipByte(path, 101);
    std::string e = loadError(dir, m);
    EXPECT_HAS(e, path + ": corrupt: checksum mismatch in " + array);
    if (std::string(file) == "params.f32") {
      auto w = runtime::readCheckpointWeights(dir);
      ASSERT_FALSE(bool(w));
      EXPECT_HAS(llvm::toString(w.takeError()), "params.f32: corrupt: checksum mismatch in the parameters");
      auto meta = runtime::readCheckpointMeta(step);
      ASSERT_TRUE(bool(meta));
      auto v = runtime::verifyCheckpointParams(step, *meta);
      ASSERT_TRUE(bool(v));
      EXPECT_HAS(llvm::toString(std::move(v)), "params.f32: corrupt: checksum mismatch in the parameters");
    }
    ASSERT_FALSE(bool(writeFileAtomically(path, orig)));
    EXPECT_EQ(loadError(dir, m), "");
  }
}

// An edited step (the payload re-serialized, the header left) and a
// flipped byte of the meta.
TEST(CheckpointVerify, MetaChecksumCatchesAnEditedStep) {
  std::string dir = tempDir();
  Model m = makeModel();
  save(dir, m, 40);
  std::string path = join(dir, "step-00000040/checkpoint.meta"), bytes = testing::readFile(path);
  auto meta = runtime::decodeCheckpointMeta(bytes, path);
  ASSERT_TRUE(bool(meta));
  EXPECT_EQ(runtime::encodeCheckpointMeta(*meta), bytes);
  meta->set_step(4);
  std::string edited = runtime::encodeCheckpointMeta(*meta);
  ASSERT_EQ(edited.size(), bytes.size());
  ASSERT_FALSE(bool(writeFileAtomically(path, bytes.substr(0, 24) + edited.substr(24))));
  EXPECT_HAS(loadError(dir, m), path + ": corrupt: checksum mismatch in the checkpoint metadata");
  auto w = runtime::readCheckpointWeights(dir);
  ASSERT_FALSE(bool(w));
  EXPECT_HAS(llvm::toString(w.takeError()), "checksum mismatch in the checkpoint metadata");
  ASSERT_FALSE(bool(writeFileAtomically(path, bytes)));
  flipByte(path, bytes.size() - 5);
  EXPECT_HAS(loadError(dir, m), "checksum mismatch in the checkpoint metadata");
  ASSERT_FALSE(bool(writeFileAtomically(path, bytes.substr(0, 20))));
  EXPECT_HAS(loadError(dir, m), "corrupt checkpoint metadata (truncated header)");
  ASSERT_FALSE(bool(writeFileAtomically(path, bytes)));
  EXPECT_EQ(loadError(dir, m), "");
}

// Values a trainer would never resume from, written with valid checksums
// (the state itself was bad): each names the array and the parameter.
TEST(CheckpointVerify, NonFiniteValuesAndNegativeAdamVNameTheParameter) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Case {
    int array; // 0 params, 1 m, 2 v
    int64_t index;
    float value;
    const char *error; // empty: loads
  };
  const Case cases[] = {
      {0, 40 + 2, nan, "params.f32: params of parameter 'b' holds nan at element 2 of 15; params must be finite"},
      {0, 31, -inf, "params.f32: params of parameter 'a' holds -inf at element 31 of 32; params must be finite"},
      {1, 5, inf, "adam_m.f32: adam_m of parameter 'a' holds inf at element 5 of 32; adam_m (AdamW's first moment) "
                  "must be finite"},
      {2, 40 + 14, -1.0f, "adam_v.f32: adam_v of parameter 'b' holds -1 at element 14 of 15; adam_v (AdamW's second "
                          "moment) must be finite and >= 0"},
      {2, 0, -1e-30f, "adam_v of parameter 'a' holds -1e-30 at element 0 of 32"},
      {2, 3, nan, "adam_v of parameter 'a' holds nan at element 3"},
      {2, 3, -0.0f, ""},      // -0 is not below zero
      {0, 35, nan, ""},       // in the gap between 'a' and 'b': no parameter's value
      {0, 60, inf, ""},       // after the last parameter
      {0, 7, 3e38f, ""},      // large but finite
  };
  for (const Case &c : cases) {
    std::string dir = tempDir();
    Model m = makeModel();
    std::vector<float> *arrays[3] = {&m.state.params, &m.state.m, &m.state.v};
    (*arrays[c.array])[size_t(c.index)] = c.value;
    save(dir, m, 2);
    std::string e = loadError(dir, m);
    if (!*c.error) {
      EXPECT_EQ(e, "") << c.index;
      continue;
    }
    EXPECT_HAS(e, c.error);
    if (c.array == 0) {
      auto w = runtime::readCheckpointWeights(dir);
      ASSERT_FALSE(bool(w));
      EXPECT_HAS(llvm::toString(w.takeError()), c.error);
    }
  }
}

// Format 1 (no header, no checksums) still loads, its values checked; a
// changed byte goes unnoticed there, which is what the warning says.
TEST(CheckpointVerify, Format1LoadsUnverified) {
  std::string dir = tempDir();
  Model m = makeModel();
  save(dir, m, 5);
  std::string step = join(dir, "step-00000005");
  toFormat1(step);
  runtime::HostState s = emptyLike(m.state);
  auto info = runtime::loadCheckpoint(dir, m.plan, s);
  ASSERT_TRUE(bool(info)) << llvm::toString(info.takeError());
  EXPECT_EQ(info->step, 5);
  EXPECT_TRUE(s.params == m.state.params && s.m == m.state.m && s.v == m.state.v);
  auto w = runtime::readCheckpointWeights(dir);
  ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
  EXPECT_EQ(w->meta.format_version(), 1u);
  setFloat(join(step, "params.f32"), 3, 1e30f);
  EXPECT_EQ(loadError(dir, m), "");
  setFloat(join(step, "adam_v.f32"), 41, -2.0f);
  EXPECT_HAS(loadError(dir, m), "adam_v.f32: adam_v of parameter 'b' holds -2 at element 1 of 15");
  // A format-1 layout claiming format 2 is corrupt, not unverified.
  std::string path = join(step, "checkpoint.meta");
  plan::CheckpointMeta meta;
  ASSERT_TRUE(meta.ParseFromString(testing::readFile(path).substr(8)));
  meta.set_format_version(2);
  ASSERT_FALSE(bool(writeFileAtomically(path, "MEGACCKP" + meta.SerializeAsString())));
  EXPECT_HAS(loadError(dir, m), "corrupt checkpoint metadata (format version 2 without a checksum header)");
}

TEST(CheckpointVerify, LatestStaysInsideTheCheckpointDirectory) {
  std::string root = tempDir(), dir = join(root, "ck"), other = join(root, "elsewhere");
  Model m = makeModel();
  save(dir, m, 2);
  save(other, m, 2);
  auto resolveError = [](const std::string &d) {
    auto r = runtime::resolveCheckpoint(d);
    return r ? std::string() : llvm::toString(r.takeError());
  };
  std::string latest = join(dir, "latest");
  for (std::string name : std::vector<std::string>{"../elsewhere/step-00000002", root + "/elsewhere/step-00000002",
                           "step-00000002/../../elsewhere/step-00000002", "..", "step-", "step-2x", ""}) {
    ASSERT_FALSE(bool(writeFileAtomically(latest, name + "\n")));
    EXPECT_HAS(resolveError(dir), "not a step directory of the checkpoint directory");
    EXPECT_NE(loadError(dir, m), "");
  }
  // A link out, by a plain name.
  ASSERT_FALSE(bool(fs::create_link(join(other, "step-00000002"), join(dir, "step-00000007"))));
  ASSERT_FALSE(bool(writeFileAtomically(latest, "step-00000007\n")));
  EXPECT_HAS(resolveError(dir), ", outside the checkpoint directory ");
  EXPECT_HAS(loadError(dir, m), "refusing to load it");
  EXPECT_FALSE(bool(runtime::readCheckpointWeights(dir)));
  // A link that stays inside.
  ASSERT_FALSE(bool(fs::create_link("step-00000002", join(dir, "step-00000008"))));
  ASSERT_FALSE(bool(writeFileAtomically(latest, "step-00000008\n")));
  EXPECT_EQ(resolveError(dir), "");
  EXPECT_EQ(loadError(dir, m), "");
  ASSERT_FALSE(bool(writeFileAtomically(latest, "step-00000002\n")));
  EXPECT_EQ(loadError(dir, m), "");
}

// Stale step directories of a later step (another run's) do not push out
// the one `latest` now names.
TEST(CheckpointVerify, TheStepLatestNamesIsKept) {
  std::string dir = tempDir();
  Model m = makeModel();
  save(dir, m, 10, 3);
  save(dir, m, 20, 3);
  save(dir, m, 30, 3);
  save(dir, m, 5); // keep 2
  EXPECT_EQ(testing::readFile(join(dir, "latest")), "step-00000005\n");
  EXPECT_TRUE(fs::exists(join(dir, "step-00000005/params.f32")));
  EXPECT_TRUE(fs::exists(join(dir, "step-00000030")));
  EXPECT_FALSE(fs::exists(join(dir, "step-00000020")));
  EXPECT_FALSE(fs::exists(join(dir, "step-00000010")));
  runtime::HostState s = emptyLike(m.state);
  auto info = runtime::loadCheckpoint(dir, m.plan, s);
  ASSERT_TRUE(bool(info)) << llvm::toString(info.takeError());
  EXPECT_EQ(info->step, 5);
  // Steps past 99999999 sort by number, not by name.
  save(dir, m, 100000000);
  save(dir, m, 100000001);
  EXPECT_TRUE(fs::exists(join(dir, "step-100000000")));
  EXPECT_TRUE(fs::exists(join(dir, "step-100000001")));
  EXPECT_FALSE(fs::exists(join(dir, "step-00000030")));
}

// A step written again replaces the old directory whole; a killed write's
// temporary directory is removed by the next checkpoint.
TEST(CheckpointVerify, RewritingAStepReplacesIt) {
  std::string dir = tempDir();
  Model m = makeModel();
  save(dir, m, 4);
  ASSERT_FALSE(bool(fs::create_directories(join(dir, ".tmp-step-00000006"))));
  m.state.params[3] = 42.0f;
  save(dir, m, 4);
  runtime::HostState s = emptyLike(m.state);
  auto info = runtime::loadCheckpoint(dir, m.plan, s);
  ASSERT_TRUE(bool(info)) << llvm::toString(info.takeError());
  EXPECT_EQ(s.params[3], 42.0f);
  std::error_code ec;
  int entries = 0;
  for (fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec)) {
    ++entries;
    EXPECT_TRUE(llvm::StringRef(it->path()).endswith("step-00000004") ||
                llvm::StringRef(it->path()).endswith("latest"))
        << it->path();
  }
  EXPECT_EQ(entries, 2);
}

// A step directory that is a link (to another run's step) is unlinked when
// it is pruned or written again: what it points to stays.
TEST(CheckpointVerify, PruningOrRewritingALinkedStepKeepsItsTarget) {
  std::string root = tempDir(), dir = join(root, "ck"), other = join(root, "other");
  Model m = makeModel();
  save(other, m, 1);
  save(other, m, 4);
  ASSERT_FALSE(bool(fs::create_directories(dir)));
  ASSERT_FALSE(bool(fs::create_link(join(other, "step-00000001"), join(dir, "step-00000001"))));
  ASSERT_FALSE(bool(fs::create_link(join(other, "step-00000004"), join(dir, "step-00000004"))));
  save(dir, m, 2);
  save(dir, m, 3); // prunes the link step-00000001
  EXPECT_FALSE(fs::exists(join(dir, "step-00000001")));
  save(dir, m, 4); // replaces the link step-00000004
  EXPECT_FALSE(fs::is_symlink_file(join(dir, "step-00000004")));
  EXPECT_TRUE(fs::exists(join(other, "step-00000001/params.f32")));
  EXPECT_TRUE(fs::exists(join(other, "step-00000004/params.f32")));
  EXPECT_EQ(loadError(other, m), "");
  EXPECT_EQ(loadError(dir, m), "");
}

} // namespace
} // namespace megac
