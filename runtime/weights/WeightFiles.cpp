#include "runtime/weights/WeightFiles.h"

#include "runtime/core/CheckedSize.h"
#include "runtime/core/ContainedPath.h"
#include "runtime/core/ModelHash.h"
#include "runtime/core/Safetensors.h"
#include "runtime/core/TensorFile.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/train/Checkpoint.h"

#include "onnx.pb.h"
#include "plan.pb.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace megac::runtime {

namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static std::string join(llvm::StringRef a, llvm::StringRef b) {
  llvm::SmallString<256> p(a);
  path::append(p, b);
  return std::string(p);
}

static bool isFile(const std::string &p) { return fs::is_regular_file(p); }

// --- which kind of path ---

static bool looksLikeSafetensors(const std::string &file) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned char head[9];
  bool yes = ::pread(fd, head, 9, 0) == 9 && head[8] == '{';
  ::close(fd);
  return yes;
}

llvm::Expected<WeightsPath> classifyWeightsPath(const std::string &given) {
  if (!fs::exists(given)) return err(given + ": --weights: no such file or directory");
  if (!fs::is_directory(given)) {
    if (llvm::StringRef(given).endswith(".json")) return WeightsPath{WeightFormat::Safetensors, given};
    if (looksLikeSafetensors(given)) return WeightsPath{WeightFormat::Safetensors, given};
    return WeightsPath{WeightFormat::Onnx, given};
  }
  const bool megac = fs::exists(join(given, "latest")) || fs::exists(join(given, "checkpoint.meta"));
  std::string index = join(given, "model.safetensors.index.json");
  std::vector<std::string> shards;
  std::error_code ec;
  for (fs::directory_iterator it(given, ec), end; it != end && !ec; it.increment(ec))
    if (llvm::StringRef(it->path()).endswith(".safetensors") && isFile(it->path())) shards.push_back(it->path());
  std::sort(shards.begin(), shards.end());
  const bool hf = isFile(index) || !shards.empty();
  if (megac && hf)
    return err(given + ": --weights is ambiguous: the directory holds both a megac checkpoint ('latest' or "
                       "checkpoint.meta) and Hugging Face weights (*.safetensors); name the file you mean, or the "
                       "checkpoint's step directory");
  if (megac) return WeightsPath{WeightFormat::MegacCheckpoint, given};
  if (isFile(index)) return WeightsPath{WeightFormat::Safetensors, index};
  if (shards.size() == 1) return WeightsPath{WeightFormat::Safetensors, shards[0]};
  if (shards.size() > 1)
    return err(given + ": --weights: " + llvm::Twine(shards.size()) +
               " .safetensors files and no model.safetensors.index.json to say which tensor is where");
  return err(given + ": --weights: the directory holds neither Hugging Face weights (model.safetensors or "
                     "model.safetensors.index.json) nor a megac checkpoint ('latest' or checkpoint.meta)");
}

// --- conversion ---

static float bf16Bits(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Element i of a little-endian T array at `base`, which a file's offset may
// leave misaligned for T (safetensors aligns only its header).
template <typename T> static T elementAt(const void *base, int64_t i) {
  using namespace llvm::support;
  return endian::read<T, little, unaligned>(static_cast<const char *>(base) + i * int64_t(sizeof(T)));
}

// n elements of `dtype` at src -> fp32 at dst, on the CPU's threads.
static void convertToF32(DType dtype, const void *src, float *dst, int64_t n) {
  constexpr int64_t kChunk = 1 << 18;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  cpu::parallelFor(chunks, kChunk, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
      switch (dtype) {
      case DType::F32:
        std::memcpy(dst + i0, static_cast<const char *>(src) + i0 * 4, size_t(i1 - i0) * 4);
        break;
      case DType::BF16:
        for (int64_t i = i0; i < i1; ++i) dst[i] = bf16Bits(elementAt<uint16_t>(src, i));
        break;
      case DType::F16:
        for (int64_t i = i0; i < i1; ++i) dst[i] = halfToFloat(elementAt<uint16_t>(src, i));
        break;
      case DType::F64:
        for (int64_t i = i0; i < i1; ++i) dst[i] = float(elementAt<double>(src, i));
        break;
      default: break; // refused before reading
      }
    }
  });
}

static bool convertible(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F64;
}

static llvm::Error checkConvertible(const WeightReader &s, int32_t i) {
  const SourceTensor &t = s.tensors[size_t(i)];
  const std::string &file = s.files.empty() ? s.given : s.files[size_t(t.file)];
  if (!convertible(t.dtype))
    return err(file + ": tensor '" + t.name + "' is " + dtypeName(t.dtype) +
               ", not a floating-point weight (F32, BF16, F16)");
  return llvm::Error::success();
}

// A read-only mapping of a whole file, unmapped when it goes out of scope.
class MappedFile {
public:
  static llvm::Expected<MappedFile> open(const std::string &file, uint64_t expectedSize) {
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err(file + ": cannot read: " + std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0 || uint64_t(st.st_size) != expectedSize) {
      ::close(fd);
      return err(file + ": changed since its header was read (" + llvm::Twine(uint64_t(st.st_size)) + " bytes, was " +
                 llvm::Twine(expectedSize) + ")");
    }
    MappedFile m;
    m.size_ = expectedSize;
    if (m.size_) {
      void *p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        return err(file + ": cannot map: " + std::strerror(errno));
      }
      ::madvise(p, m.size_, MADV_SEQUENTIAL | MADV_WILLNEED);
      m.data_ = static_cast<const char *>(p);
    }
    ::close(fd);
    return m;
  }
  MappedFile() = default;
  MappedFile(MappedFile &&o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; }
  MappedFile &operator=(MappedFile &&) = delete;
  ~MappedFile() {
    if (data_) ::munmap(const_cast<char *>(data_), size_);
  }
  const char *data() const { return data_; }

private:
  const char *data_ = nullptr;
  uint64_t size_ = 0;
};

// Reads each file's wanted tensors through one mapping of that file.
// `fileSizes[f]` is the size the headers were checked against.
static llvm::Error readMapped(const WeightReader &s, const std::vector<uint64_t> &fileSizes,
                              std::vector<std::pair<int32_t, float *>> wanted, WeightReadStats &stats) {
  for (const auto &w : wanted)
    if (auto e = checkConvertible(s, w.first)) return e;
  auto t0 = std::chrono::steady_clock::now();
  std::stable_sort(wanted.begin(), wanted.end(), [&](const auto &a, const auto &b) {
    const SourceTensor &x = s.tensors[size_t(a.first)], &y = s.tensors[size_t(b.first)];
    return std::make_pair(x.file, x.begin) < std::make_pair(y.file, y.begin);
  });
  for (size_t i = 0; i < wanted.size();) {
    const int32_t f = s.tensors[size_t(wanted[i].first)].file;
    auto map = MappedFile::open(s.files[size_t(f)], fileSizes[size_t(f)]);
    if (!map) return map.takeError();
    ++stats.files;
    for (; i < wanted.size() && s.tensors[size_t(wanted[i].first)].file == f; ++i) {
      const SourceTensor &t = s.tensors[size_t(wanted[i].first)];
      convertToF32(t.dtype, map->data() + t.begin, wanted[i].second, t.numel);
      stats.bytes += t.numel * int64_t(dtypeSize(t.dtype));
    }
  }
  stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return llvm::Error::success();
}

// --- safetensors: one file or an index of shards ---

class SafetensorsSource : public WeightReader {
public:
  std::vector<uint64_t> fileSizes;
  std::string describe() const override {
    std::set<std::string> dts;
    for (const SourceTensor &t : tensors) dts.insert(safetensorsDTypeName(t.dtype));
    std::string d = "safetensors, " + std::to_string(files.size()) + (files.size() == 1 ? " file, " : " files, ");
    for (auto it = dts.begin(); it != dts.end(); ++it) d += (it == dts.begin() ? "" : "/") + *it;
    return d;
  }
  llvm::Error read(std::vector<std::pair<int32_t, float *>> wanted, WeightReadStats &stats) override {
    return readMapped(*this, fileSizes, std::move(wanted), stats);
  }

  llvm::Error addFile(const std::string &file, const std::set<std::string> *only) {
    auto h = readSafetensorsHeader(file);
    if (!h) return h.takeError();
    int32_t index = int32_t(files.size());
    files.push_back(file);
    fileSizes.push_back(h->fileSize);
    for (SafetensorsEntry &e : h->entries) {
      if (only && !only->count(e.name)) continue;
      SourceTensor t;
      t.name = e.name;
      t.dtype = e.dtype;
      t.shape = e.shape;
      t.numel = numElements(e.shape); // checked against data_offsets by the header reader
      t.file = index;
      t.begin = e.begin;
      tensors.push_back(std::move(t));
    }
    return llvm::Error::success();
  }
};

static llvm::Expected<std::unique_ptr<WeightReader>> openSafetensors(const std::string &given,
                                                                       const std::string &file) {
  auto src = std::make_unique<SafetensorsSource>();
  src->given = given;
  if (!llvm::StringRef(file).endswith(".json")) {
    if (auto e = src->addFile(file, nullptr)) return std::move(e);
    return std::unique_ptr<WeightReader>(std::move(src));
  }
  auto buf = llvm::MemoryBuffer::getFile(file, false, false);
  if (!buf) return err(file + ": cannot read: " + buf.getError().message());
  if ((*buf)->getBufferSize() > kMaxSafetensorsHeader) return err(file + ": too large for a safetensors index");
  auto json = llvm::json::parse((*buf)->getBuffer());
  if (!json) return err(file + ": not a safetensors index: " + llvm::toString(json.takeError()));
  const llvm::json::Object *map = json->getAsObject() ? json->getAsObject()->getObject("weight_map") : nullptr;
  if (!map) return err(file + ": not a safetensors index (no \"weight_map\" object)");
  std::string dir(path::parent_path(file));
  if (dir.empty()) dir = ".";
  std::map<std::string, std::set<std::string>> byShard; // shard -> its tensors, in file-name order
  for (const auto &kv : *map) {
    auto shard = kv.second.getAsString();
    if (!shard) return err(file + ": weight_map entry '" + kv.first.str() + "' is not a file name");
    llvm::StringRef s = *shard;
    bool plain = !s.empty() && !path::is_absolute(s);
    for (auto it = path::begin(s), end = path::end(s); plain && it != end; ++it) plain = *it != "..";
    if (!plain)
      return err(file + ": weight_map entry '" + kv.first.str() + "' names '" + s.str() +
                 "', which is not a file inside the index's directory");
    byShard[s.str()].insert(kv.first.str());
  }
  if (byShard.empty()) return err(file + ": the index's weight_map is empty");
  for (const auto &[shard, names] : byShard) {
    std::string p = join(dir, shard);
    if (!fs::exists(p)) return err(p + ": shard named by " + file + " is missing");
    if (auto e = checkInsideDirectory(dir, p, "shard named by " + file)) return std::move(e);
    size_t before = src->tensors.size();
    if (auto e = src->addFile(p, &names)) return std::move(e);
    if (src->tensors.size() - before != names.size()) {
      std::set<std::string> found;
      for (size_t i = before; i < src->tensors.size(); ++i) found.insert(src->tensors[i].name);
      for (const std::string &n : names)
        if (!found.count(n)) return err(p + ": has no tensor '" + n + "', which " + file + " places there");
    }
  }
  return std::unique_ptr<WeightReader>(std::move(src));
}

// --- ONNX initializers ---

class OnnxSource : public WeightReader {
public:
  onnx::ModelProto model;
  std::vector<const onnx::TensorProto *> protos; // per tensor
  std::string baseDir;
  std::string describe() const override { return "ONNX initializers"; }
  llvm::Error read(std::vector<std::pair<int32_t, float *>> wanted, WeightReadStats &stats) override {
    auto t0 = std::chrono::steady_clock::now();
    stats.files = 1;
    for (const auto &[i, dst] : wanted) {
      if (auto e = checkConvertible(*this, i)) return e;
      const SourceTensor &t = tensors[size_t(i)];
      const onnx::TensorProto &p = *protos[size_t(i)];
      Tensor data;
      if (hasExternalData(p)) {
        auto loc = externalLocation(p, t.name);
        if (!loc) return loc.takeError();
        data = Tensor(t.dtype, t.shape);
        if (auto e = readExternal(baseDir, *loc, t.name, data.raw(), int64_t(data.nbytes()))) return e;
      } else {
        auto r = tensorFromProto(p, t.name);
        if (!r) return err(given + ": " + llvm::toString(r.takeError()));
        data = std::move(*r);
      }
      if (data.numel() != t.numel) return err(given + ": initializer '" + t.name + "' holds the wrong number of elements");
      convertToF32(t.dtype, data.raw(), dst, t.numel);
      stats.bytes += int64_t(data.nbytes());
    }
    stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return llvm::Error::success();
  }
};

static llvm::Expected<std::unique_ptr<WeightReader>> openOnnx(const std::string &file) {
  auto src = std::make_unique<OnnxSource>();
  src->given = file;
  auto buf = llvm::MemoryBuffer::getFile(file, false, false);
  if (!buf) return err(file + ": cannot read: " + buf.getError().message());
  if (!parseWholeMessage((*buf)->getBuffer(), src->model))
    return err(file + ": --weights: neither an ONNX model, safetensors, nor a safetensors index");
  src->baseDir = std::string(path::parent_path(file));
  if (src->baseDir.empty()) src->baseDir = ".";
  for (const onnx::TensorProto &p : src->model.graph().initializer()) {
    SourceTensor t;
    t.name = p.name();
    switch (p.data_type()) {
    case onnx::TensorProto::FLOAT: t.dtype = DType::F32; break;
    case onnx::TensorProto::FLOAT16: t.dtype = DType::F16; break;
    case onnx::TensorProto::BFLOAT16: t.dtype = DType::BF16; break;
    case onnx::TensorProto::DOUBLE: t.dtype = DType::F64; break;
    default: continue; // integer constants are never weights
    }
    auto n = checkedNumel(p.dims());
    if (!n) return err(file + ": initializer '" + p.name() + "' has a bad shape");
    t.shape.assign(p.dims().begin(), p.dims().end());
    t.numel = *n;
    src->protos.push_back(&p);
    src->tensors.push_back(std::move(t));
  }
  return std::unique_ptr<WeightReader>(std::move(src));
}

// --- a megac checkpoint's parameters ---

class CheckpointSource : public WeightReader {
public:
  int64_t step = 0;
  std::vector<uint64_t> fileSizes;
  std::string describe() const override { return "megac checkpoint, step " + std::to_string(step); }
  llvm::Error read(std::vector<std::pair<int32_t, float *>> wanted, WeightReadStats &stats) override {
    return readMapped(*this, fileSizes, std::move(wanted), stats);
  }
};

static llvm::Expected<std::unique_ptr<WeightReader>> openCheckpoint(const std::string &given) {
  auto stepDir = resolveCheckpoint(given);
  if (!stepDir) return stepDir.takeError();
  auto meta = readCheckpointMeta(*stepDir);
  if (!meta) return meta.takeError();
  // The parameters' checksum and finiteness, before any of them is used.
  if (auto e = verifyCheckpointParams(*stepDir, *meta)) return std::move(e);
  auto src = std::make_unique<CheckpointSource>();
  src->given = given;
  src->step = meta->step();
  std::string params = join(*stepDir, "params.f32");
  uint64_t size = 0;
  if (auto ec = fs::file_size(params, size)) return err(params + ": cannot read: " + ec.message());
  const int64_t elements = meta->host_elements();
  if (elements < 0 || uint64_t(elements) * 4 != size)
    return err(params + ": has " + llvm::Twine(size) + " bytes, the checkpoint's metadata says " +
               llvm::Twine(elements) + " floats (truncated?)");
  src->files.push_back(params);
  src->fileSizes.push_back(size);
  for (const auto &p : meta->params()) {
    auto n = checkedNumel(p.shape(), elements);
    if (!n || p.host_offset() < 0 || p.host_offset() > elements - *n)
      return err(*stepDir + ": corrupt checkpoint metadata (parameter '" + p.name() + "' lies outside params.f32)");
    SourceTensor t;
    t.name = p.name();
    t.shape.assign(p.shape().begin(), p.shape().end());
    t.numel = *n;
    t.begin = uint64_t(p.host_offset()) * 4;
    src->tensors.push_back(std::move(t));
  }
  return std::unique_ptr<WeightReader>(std::move(src));
}

llvm::Expected<std::unique_ptr<WeightReader>> openWeightSource(const std::string &given) {
  auto kind = classifyWeightsPath(given);
  if (!kind) return kind.takeError();
  llvm::Expected<std::unique_ptr<WeightReader>> src = [&]() -> llvm::Expected<std::unique_ptr<WeightReader>> {
    switch (kind->format) {
    case WeightFormat::Safetensors: return openSafetensors(given, kind->path);
    case WeightFormat::MegacCheckpoint: return openCheckpoint(kind->path);
    case WeightFormat::Onnx: break;
    }
    return openOnnx(kind->path);
  }();
  if (!src) return src.takeError();
  std::set<std::string> seen;
  for (const SourceTensor &t : (*src)->tensors)
    if (!seen.insert(t.name).second) return err(given + ": tensor '" + t.name + "' appears twice");
  return src;
}

// --- the plan's own model ---

llvm::Expected<std::unique_ptr<WeightReader>> openPlanModel(const plan::Plan &plan, bool allowUnreadable) {
  const std::string path = plan.model_path();
  auto src = std::make_unique<OnnxSource>();
  src->given = path;
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) {
    if (allowUnreadable) return std::unique_ptr<WeightReader>(std::move(src)); // --init: every parameter
    return err(path + ": cannot read the model's weights (" + buf.getError().message() +
               "); pass --model FILE where the plan's ONNX file has moved (the plan looks for it at the same place "
               "relative to the plan as at compile time), --weights FILE, or --init to initialize them");
  }
  if (!parseWholeMessage((*buf)->getBuffer(), src->model)) return err(path + ": not a valid ONNX model");
  // The plan's own model: its graph and its weights' names and shapes (not their values).
  if (plan.model_hash() != 0 && onnxModelHash(src->model) != plan.model_hash())
    return err(path + ": not the model this plan was compiled from (its graph, or its weights' names or shapes, "
                      "differ): pass --model with the ONNX file the plan was compiled from, or recompile");
  src->baseDir = std::string(path::parent_path(path));
  if (src->baseDir.empty()) src->baseDir = ".";
  for (const onnx::TensorProto &p : src->model.graph().initializer()) {
    // External data whose file is absent: a weight without data (--init
    // initializes it). A location that cannot be parsed is read's error.
    if (hasExternalData(p)) {
      auto loc = externalLocation(p, p.name());
      if (loc && !fs::exists(join(src->baseDir, loc->location))) continue;
      if (!loc) llvm::consumeError(loc.takeError());
    }
    SourceTensor t;
    t.name = p.name();
    t.dtype = DType(p.data_type()); // ONNX's numbering
    t.shape.assign(p.dims().begin(), p.dims().end());
    t.numel = 1;
    for (int64_t d : p.dims()) t.numel *= d;
    src->protos.push_back(&p);
    src->tensors.push_back(std::move(t));
  }
  return std::unique_ptr<WeightReader>(std::move(src));
}

WeightReaders fileWeightReaders() { return {openWeightSource, openPlanModel}; }

} // namespace megac::runtime
