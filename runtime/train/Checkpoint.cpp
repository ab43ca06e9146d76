#include "runtime/train/Checkpoint.h"

#include "runtime/core/LittleEndian.h"

#include "runtime/core/CheckedSize.h"
#include "runtime/core/TensorFile.h"
#include "runtime/cpu/Kernel.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace megac::runtime {

namespace fs = llvm::sys::fs;

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static constexpr char kMagic[8] = {'M', 'E', 'G', 'A', 'C', 'C', 'K', 'P'};
// checkpoint.meta from format 2 on: the magic, then version (u32), payload
// bytes (u32), xxHash64 of the payload (u64), little-endian; then the payload.
static constexpr size_t kHeaderBytes = 16;
// A header is told from the headerless format 1 by its first byte.
static_assert((kCheckpointVersion & 0xff) != 0x08, "a header's first byte must differ from format 1's (0x08)");
// The array checksums' chunk: small enough that a chunk copied on load is
// still in cache when it is hashed, and that 100 GB make 25k tasks.
static constexpr uint64_t kChecksumChunkBytes = 4 << 20;

static const char *const kArrayFiles[3] = {"params.f32", "adam_m.f32", "adam_v.f32"};

static std::string join(const std::string &a, const std::string &b) {
  llvm::SmallString<256> p(a);
  llvm::sys::path::append(p, b);
  return std::string(p);
}

static std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// "params" for "params.f32".
static std::string arrayName(llvm::StringRef file) { return file.split('.').first.str(); }

static std::string arrayDescription(llvm::StringRef file) {
  if (file == "params.f32") return "the parameters (params)";
  if (file == "adam_m.f32") return "AdamW's first moments (adam_m)";
  if (file == "adam_v.f32") return "AdamW's second moments (adam_v)";
  return "the array " + file.str();
}

uint64_t checkpointArrayChecksum(const char *data, uint64_t size, uint64_t chunkBytes) {
  const uint64_t chunks = chunkBytes ? (size + chunkBytes - 1) / chunkBytes : 0;
  std::vector<uint64_t> hashes(chunks);
  cpu::parallelFor(int64_t(chunks), int64_t(chunkBytes), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      uint64_t begin = uint64_t(c) * chunkBytes;
      hashes[size_t(c)] = llvm::xxHash64(llvm::StringRef(data + begin, std::min(chunkBytes, size - begin)));
    }
  });
  std::string all;
  all.reserve(chunks * 8);
  for (uint64_t h : hashes) putLE(all, h, 8);
  return llvm::xxHash64(all);
}

std::string encodeCheckpointMeta(const plan::CheckpointMeta &meta) {
  std::string payload = meta.SerializeAsString();
  std::string bytes(kMagic, sizeof kMagic);
  putLE(bytes, meta.format_version(), 4);
  putLE(bytes, payload.size(), 4);
  putLE(bytes, llvm::xxHash64(payload), 8);
  return bytes + payload;
}

llvm::Expected<plan::CheckpointMeta> decodeCheckpointMeta(llvm::StringRef data, const std::string &path) {
  if (data.size() < sizeof kMagic || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0)
    return err(path + ": not a megac checkpoint");
  data = data.drop_front(sizeof kMagic);
  plan::CheckpointMeta meta;
  // Format 1: the payload right after the magic. Its first field is
  // format_version = 1 (key 0x08); a format-2 header starts with its version, 2.
  if (!data.empty() && data[0] == 0x08) {
    if (!parseWholeMessage(data, meta)) return err(path + ": corrupt checkpoint metadata");
    if (meta.format_version() != 1)
      return err(path + ": corrupt checkpoint metadata (format version " + llvm::Twine(meta.format_version()) +
                 " without a checksum header)");
    return meta;
  }
  if (data.size() < kHeaderBytes) return err(path + ": corrupt checkpoint metadata (truncated header)");
  const uint32_t version = uint32_t(getLE(data.data(), 4));
  const uint64_t size = getLE(data.data() + 4, 4), recorded = getLE(data.data() + 8, 8);
  if (version != kCheckpointVersion)
    return err(path + ": checkpoint format version " + llvm::Twine(version) + " is not supported (this megac reads 1 and " +
               llvm::Twine(kCheckpointVersion) + ")");
  data = data.drop_front(kHeaderBytes);
  if (data.size() != size)
    return err(path + ": corrupt checkpoint metadata (truncated: its header says " + llvm::Twine(size) +
               " bytes follow, the file has " + llvm::Twine(data.size()) + ")");
  if (uint64_t h = llvm::xxHash64(data); h != recorded)
    return err(path + ": corrupt: checksum mismatch in the checkpoint metadata (xxh64 " + hex(h) +
               ", its header records " + hex(recorded) + ")");
  if (!parseWholeMessage(data, meta)) return err(path + ": corrupt checkpoint metadata");
  if (meta.format_version() != version)
    return err(path + ": corrupt checkpoint metadata (format version " + llvm::Twine(meta.format_version()) +
               " under a header of version " + llvm::Twine(version) + ")");
  return meta;
}

static llvm::Error fsyncDir(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return err(dir + ": " + std::strerror(errno));
  ::fsync(fd);
  ::close(fd);
  return llvm::Error::success();
}

static llvm::Error writeArray(const std::string &path, const std::vector<float> &v) {
  return writeFileAtomically(path, llvm::StringRef(reinterpret_cast<const char *>(v.data()), v.size() * 4));
}

// Testing only: MEGAC_CHECKPOINT_CRASH_AT=STEP:STAGE kills the process with
// SIGKILL (what `kill -9` sends) at that point of writing step STEP's
// checkpoint, so that a test can stop a run at each point deterministically.
static void crashPoint(int64_t step, const char *stage) {
  static const char *at = std::getenv("MEGAC_CHECKPOINT_CRASH_AT");
  if (at && std::string(at) == std::to_string(step) + ":" + stage) ::raise(SIGKILL);
}

// "step-N": N the digits after the prefix, or -1.
static int64_t stepNumber(llvm::StringRef name) {
  if (!name.consume_front("step-") || name.empty() || name.size() > 18) return -1;
  int64_t n = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n;
}

// Removes a directory tree; a symbolic link is removed, never what it points to.
static void removeTree(const std::string &path) {
  if (fs::is_symlink_file(path)) fs::remove(path);
  else fs::remove_directories(path, /*IgnoreErrors=*/true);
}

// Puts the directory `from` at `to`, replacing a directory there (a step
// written again) without a moment in which neither exists.
static llvm::Error renameDirectory(const std::string &from, const std::string &to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return llvm::Error::success();
  if (errno == EEXIST || errno == ENOTEMPTY) {
    // Swap the two atomically, then remove the old one (now at `from`).
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
      removeTree(from);
      return llvm::Error::success();
    }
  }
  if (errno != EINVAL && errno != ENOSYS && errno != EEXIST && errno != ENOTEMPTY)
    return err(to + ": cannot rename into place: " + std::strerror(errno));
  // A file system without renameat2's flags (NFS): remove, then rename.
  removeTree(to);
  if (auto ec = fs::rename(from, to)) return err(to + ": cannot rename into place: " + ec.message());
  return llvm::Error::success();
}

llvm::Error saveCheckpoint(const std::string &dir, const plan::Plan &plan, const HostState &state,
                           const CheckpointInfo &info, int keep) {
  if (auto ec = fs::create_directories(dir)) return err(dir + ": cannot create: " + ec.message());
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(info.step));
  std::string final = join(dir, name), tmp = join(dir, std::string(".tmp-") + name);
  removeTree(tmp);
  if (auto ec = fs::create_directories(tmp)) return err(tmp + ": cannot create: " + ec.message());
  crashPoint(info.step, "dir");
  plan::CheckpointMeta meta;
  meta.set_format_version(kCheckpointVersion);
  meta.set_step(info.step);
  meta.set_total_steps(info.totalSteps);
  meta.set_seed(info.seed);
  meta.set_data_index(info.dataIndex);
  meta.set_micro_batches_per_step(info.microBatchesPerStep);
  meta.set_gpus(info.gpus);
  meta.set_batch(info.batch);
  meta.set_host_elements(int64_t(state.params.size()));
  meta.set_model_path(plan.model_path());
  *meta.mutable_optimizer() = info.optimizer;
  meta.set_weights_source(info.weightsSource);
  for (const auto &[param, tensor] : info.weightNames) {
    auto *n = meta.add_weight_names();
    n->set_param(param);
    n->set_tensor(tensor);
  }
  for (const plan::Parameter &p : plan.parameters()) {
    auto *mp = meta.add_params();
    mp->set_name(p.name());
    mp->mutable_shape()->CopyFrom(p.type().shape());
    mp->set_host_offset(p.host_offset());
  }
  meta.set_checksum_chunk_bytes(kChecksumChunkBytes);
  const std::vector<float> *arrays[3] = {&state.params, &state.m, &state.v};
  for (int i = 0; i < 3; ++i) {
    if (arrays[i]->size() != state.params.size())
      return err(final + ": cannot write: the host arrays differ in length");
    auto *c = meta.add_checksums();
    c->set_file(kArrayFiles[i]);
    c->set_xxh64(checkpointArrayChecksum(reinterpret_cast<const char *>(arrays[i]->data()), arrays[i]->size() * 4,
                                         kChecksumChunkBytes));
  }
  for (int i = 0; i < 3; ++i) {
    if (auto e = writeArray(join(tmp, kArrayFiles[i]), *arrays[i])) return e;
    crashPoint(info.step, kArrayFiles[i]);
  }
  if (auto e = writeFileAtomically(join(tmp, "checkpoint.meta"), encodeCheckpointMeta(meta))) return e;
  crashPoint(info.step, "meta");
  if (auto e = fsyncDir(tmp)) return e;
  if (auto e = renameDirectory(tmp, final)) return e;
  if (auto e = fsyncDir(dir)) return e; // the step directory is in place before `latest` names it
  crashPoint(info.step, "rename");
  if (auto e = writeFileAtomically(join(dir, "latest"), std::string(name) + "\n")) return e;
  if (auto e = fsyncDir(dir)) return e;
  crashPoint(info.step, "latest");
  // Keep the newest `keep` step directories, and always the one `latest`
  // now names (a directory of a later step may be left from another run).
  // Leftovers of interrupted writes go too.
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec)) {
    llvm::StringRef base = llvm::sys::path::filename(it->path());
    int64_t n = stepNumber(base);
    if (n >= 0 && n != info.step) steps.push_back({n, it->path()});
    if (base.startswith(".tmp-step-") && base != llvm::sys::path::filename(tmp)) removeTree(it->path());
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; keep > 0 && i + size_t(keep - 1) < steps.size(); ++i) removeTree(steps[i].second);
  crashPoint(info.step, "cleanup");
  return llvm::Error::success();
}

// Up to 4 KiB of a small file (`latest`): never a whole /dev/zero.
static llvm::Expected<std::string> readSmallFile(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return err(path + ": cannot read: " + std::strerror(errno));
  std::string s(4096, '\0');
  size_t have = 0;
  while (have < s.size()) {
    ssize_t n = ::read(fd, &s[have], s.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += size_t(n);
  }
  ::close(fd);
  s.resize(have);
  return s;
}

llvm::Expected<std::string> resolveCheckpoint(const std::string &dir) {
  if (fs::exists(join(dir, "checkpoint.meta"))) return dir;
  std::string latestPath = join(dir, "latest");
  if (!fs::exists(latestPath)) return err(dir + ": not a checkpoint directory (no 'latest' and no checkpoint.meta)");
  auto latest = readSmallFile(latestPath);
  if (!latest) return latest.takeError();
  std::string step = llvm::StringRef(*latest).trim().str();
  // `latest` holds a plain step-N name, written by saveCheckpoint.
  if (stepNumber(step) < 0)
    return err(latestPath + ": names '" + llvm::StringRef(step).take_front(200) +
               "', not a step directory of the checkpoint directory (step-NNNNNNNN)");
  std::string p = join(dir, step);
  if (!fs::exists(join(p, "checkpoint.meta"))) return err(p + ": checkpoint named by 'latest' is missing");
  // ... which must be inside `dir` once links are followed.
  llvm::SmallString<256> realDir, realStep;
  if (auto ec = fs::real_path(dir, realDir)) return err(dir + ": cannot resolve: " + ec.message());
  if (auto ec = fs::real_path(p, realStep)) return err(p + ": cannot resolve: " + ec.message());
  if (llvm::sys::path::parent_path(realStep) != realDir)
    return err(p + ": the step directory 'latest' names resolves to " + realStep + ", outside the checkpoint directory " +
               realDir + "; refusing to load it");
  return p;
}

llvm::Expected<plan::CheckpointMeta> readCheckpointMeta(const std::string &stepDir) {
  std::string path = join(stepDir, "checkpoint.meta");
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return err(path + ": cannot read: " + buf.getError().message());
  auto meta = decodeCheckpointMeta((*buf)->getBuffer(), path);
  if (meta && meta->format_version() < 2)
    llvm::errs() << "megac: warning: " << stepDir << ": a checkpoint of format version " << meta->format_version()
                 << ", which carries no checksums: its files are read unverified\n";
  return meta;
}

namespace {
struct ParamRange {
  const std::string *name;
  int64_t offset, numel;
};
} // namespace

// The parameters' ranges of the host arrays, checked against host_elements.
static llvm::Expected<std::vector<ParamRange>> paramRanges(const std::string &stepDir,
                                                           const plan::CheckpointMeta &meta) {
  const int64_t elements = meta.host_elements();
  if (elements < 0) return err(stepDir + ": corrupt checkpoint metadata (negative size)");
  std::vector<ParamRange> ranges;
  for (const auto &p : meta.params()) {
    auto n = checkedNumel(p.shape(), elements);
    if (!n || p.host_offset() < 0 || p.host_offset() > elements - *n)
      return err(stepDir + ": corrupt checkpoint metadata (parameter '" + p.name() + "' lies outside params.f32)");
    ranges.push_back({&p.name(), p.host_offset(), *n});
  }
  return ranges;
}

// The first value of `ranges` that is non-finite (or, with nonNegative,
// below zero; -0 is fine) as (range, index in it), or (-1, -1). By bits, so
// that it vectorizes.
static std::pair<int64_t, int64_t> firstBadValue(const char *data, const std::vector<ParamRange> &ranges,
                                                 bool nonNegative) {
  constexpr int64_t kPiece = 1 << 20;
  struct Piece {
    int64_t range, begin, end;
  };
  std::vector<Piece> pieces;
  for (size_t r = 0; r < ranges.size(); ++r)
    for (int64_t b = 0; b < ranges[r].numel; b += kPiece)
      pieces.push_back({int64_t(r), b, std::min(ranges[r].numel, b + kPiece)});
  std::vector<int64_t> first(pieces.size(), -1);
  cpu::parallelFor(int64_t(pieces.size()), kPiece, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const Piece &pc = pieces[size_t(p)];
      const char *base = data + ranges[size_t(pc.range)].offset * 4;
      for (int64_t i0 = pc.begin; i0 < pc.end; i0 += 4096) {
        const int64_t i1 = std::min(pc.end, i0 + 4096);
        bool bad = false;
        for (int64_t i = i0; i < i1; ++i) {
          uint32_t u;
          std::memcpy(&u, base + i * 4, 4);
          bad |= (u & 0x7f800000u) == 0x7f800000u;
          if (nonNegative) bad |= u > 0x80000000u;
        }
        if (!bad) continue;
        for (int64_t i = i0; i < i1 && first[size_t(p)] < 0; ++i) {
          uint32_t u;
          std::memcpy(&u, base + i * 4, 4);
          if ((u & 0x7f800000u) == 0x7f800000u || (nonNegative && u > 0x80000000u)) first[size_t(p)] = i;
        }
        break;
      }
    }
  });
  for (size_t p = 0; p < pieces.size(); ++p)
    if (first[p] >= 0) return {pieces[p].range, first[p]};
  return {-1, -1};
}

llvm::Error verifyCheckpointArray(const std::string &stepDir, const plan::CheckpointMeta &meta, llvm::StringRef file,
                                  float *dest) {
  const std::string path = join(stepDir, file.str());
  auto ranges = paramRanges(stepDir, meta);
  if (!ranges) return ranges.takeError();
  const int64_t elements = meta.host_elements();
  const bool verified = meta.format_version() >= 2;
  uint64_t recorded = 0, chunk = meta.checksum_chunk_bytes();
  if (verified) {
    const plan::CheckpointMeta::ArrayChecksum *c = nullptr;
    for (const auto &x : meta.checksums())
      if (x.file() == file) c = &x;
    if (!c) return err(stepDir + ": corrupt checkpoint metadata (no checksum of " + file + ")");
    if (chunk == 0) return err(stepDir + ": corrupt checkpoint metadata (checksum chunk of 0 bytes)");
    recorded = c->xxh64();
  }
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return err(path + ": cannot read: " + buf.getError().message());
  const uint64_t size = (*buf)->getBufferSize();
  const auto expected = checkedMul(elements, 4);
  if (!expected) return err(stepDir + ": corrupt checkpoint metadata (" + llvm::Twine(elements) + " elements)");
  if (size != uint64_t(*expected))
    return err(path + ": has " + llvm::Twine(size) + " bytes, expected " + llvm::Twine(*expected) + " (truncated?)");
  const char *src = (*buf)->getBufferStart();
  char *to = reinterpret_cast<char *>(dest);
  if (verified) {
    // Copied and hashed a chunk at a time: the hash reads what was copied.
    const uint64_t chunks = (size + chunk - 1) / chunk;
    std::vector<uint64_t> hashes(chunks);
    cpu::parallelFor(int64_t(chunks), int64_t(chunk), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const uint64_t begin = uint64_t(c) * chunk, n = std::min(chunk, size - begin);
        const char *from = src + begin;
        if (to) {
          std::memcpy(to + begin, from, n);
          from = to + begin;
        }
        hashes[size_t(c)] = llvm::xxHash64(llvm::StringRef(from, n));
      }
    });
    std::string all;
    all.reserve(chunks * 8);
    for (uint64_t h : hashes) putLE(all, h, 8);
    if (uint64_t h = llvm::xxHash64(all); h != recorded)
      return err(path + ": corrupt: checksum mismatch in " + arrayDescription(file) + " (xxh64 " + hex(h) +
                 ", checkpoint.meta records " + hex(recorded) + ")");
  } else if (to) {
    cpu::parallelFor(int64_t(size), 1, [&](int64_t b, int64_t e) { std::memcpy(to + b, src + b, size_t(e - b)); });
  }
  const bool nonNegative = file == "adam_v.f32";
  auto [r, i] = firstBadValue(to ? to : src, *ranges, nonNegative);
  if (r >= 0) {
    const ParamRange &pr = (*ranges)[size_t(r)];
    float x;
    std::memcpy(&x, (to ? to : src) + (pr.offset + i) * 4, 4);
    std::string a = arrayName(file);
    char value[32];
    std::snprintf(value, sizeof value, "%g", double(x));
    return err(path + ": " + a + " of parameter '" + *pr.name + "' holds " + value +
               " at element " + llvm::Twine(i) + " of " + llvm::Twine(pr.numel) + "; " +
               (nonNegative ? a + " (AdamW's second moment) must be finite and >= 0"
                            : a + (a == "adam_m" ? " (AdamW's first moment)" : "") + " must be finite"));
  }
  return llvm::Error::success();
}

llvm::Expected<std::vector<float>> readCheckpointArray(const std::string &stepDir, const plan::CheckpointMeta &meta,
                                                       llvm::StringRef file) {
  const auto bytes = checkedMul(meta.host_elements(), 4);
  if (!bytes) return err(stepDir + ": corrupt checkpoint metadata (" + llvm::Twine(meta.host_elements()) + " elements)");
  // The file's size before anything is allocated for it.
  const std::string path = join(stepDir, file.str());
  uint64_t size = 0;
  if (auto ec = fs::file_size(path, size)) return err(path + ": cannot read: " + ec.message());
  if (size != uint64_t(*bytes))
    return err(path + ": has " + llvm::Twine(size) + " bytes, expected " + llvm::Twine(*bytes) + " (truncated?)");
  std::vector<float> v(static_cast<size_t>(meta.host_elements()));
  if (auto e = verifyCheckpointArray(stepDir, meta, file, v.data())) return std::move(e);
  return v;
}

llvm::Expected<CheckpointInfo> loadCheckpoint(const std::string &dir, const plan::Plan &plan, HostState &state,
                                              const std::function<llvm::Error(const CheckpointInfo &)> &accept) {
  auto stepDir = resolveCheckpoint(dir);
  if (!stepDir) return stepDir.takeError();
  auto meta = readCheckpointMeta(*stepDir);
  if (!meta) return meta.takeError();
  if (meta->params_size() != plan.parameters_size())
    return err(*stepDir + ": checkpoint has " + llvm::Twine(meta->params_size()) + " parameters, the plan has " +
               llvm::Twine(plan.parameters_size()));
  for (int i = 0; i < plan.parameters_size(); ++i) {
    const auto &mp = meta->params(i);
    const auto &pp = plan.parameters(i);
    bool same = mp.name() == pp.name() && mp.host_offset() == pp.host_offset() &&
                mp.shape_size() == pp.type().shape_size() &&
                std::equal(mp.shape().begin(), mp.shape().end(), pp.type().shape().begin());
    if (!same) return err(*stepDir + ": parameter '" + mp.name() + "' does not match the plan's '" + pp.name() + "'");
  }
  if (meta->host_elements() != int64_t(state.params.size()) || state.m.size() != state.params.size() ||
      state.v.size() != state.params.size())
    return err(*stepDir + ": checkpoint arrays do not match the plan's layout");
  if (meta->step() < 0 || meta->data_index() < 0)
    return err(*stepDir + ": corrupt checkpoint metadata (step " + llvm::Twine(meta->step()) + ", data index " +
               llvm::Twine(meta->data_index()) + ")");
  CheckpointInfo info;
  info.step = meta->step();
  info.totalSteps = meta->total_steps();
  info.seed = meta->seed();
  info.dataIndex = meta->data_index();
  info.microBatchesPerStep = meta->micro_batches_per_step();
  info.gpus = meta->gpus() > 1 ? meta->gpus() : 1;
  info.batch = meta->batch();
  info.optimizer = meta->optimizer();
  info.weightsSource = meta->weights_source();
  for (const auto &n : meta->weight_names()) info.weightNames.push_back({n.param(), n.tensor()});
  if (accept)
    if (auto e = accept(info)) return std::move(e);
  // Verified as read, straight into the host arrays (they may be pinned,
  // registered with CUDA); on an error they hold a partial load.
  for (auto [file, vec] : {std::pair<const char *, std::vector<float> *>{"params.f32", &state.params},
                           {"adam_m.f32", &state.m},
                           {"adam_v.f32", &state.v}})
    if (auto e = verifyCheckpointArray(*stepDir, *meta, file, vec->data())) return std::move(e);
  state.step = meta->step();
  return info;
}

} // namespace megac::runtime
