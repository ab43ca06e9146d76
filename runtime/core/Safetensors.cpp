#include "runtime/core/Safetensors.h"

#include "runtime/core/CheckedSize.h"
#include "runtime/core/TensorFile.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace megac {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static const struct {
  DType dtype;
  const char *name;
} kDTypeNames[] = {{DType::F32, "F32"}, {DType::F64, "F64"}, {DType::F16, "F16"}, {DType::BF16, "BF16"},
                   {DType::I8, "I8"},   {DType::I16, "I16"}, {DType::I32, "I32"}, {DType::I64, "I64"},
                   {DType::U8, "U8"},   {DType::U16, "U16"}, {DType::U32, "U32"}, {DType::U64, "U64"},
                   {DType::Bool, "BOOL"}};

static const char *safetensorsDType(DType t) {
  for (const auto &d : kDTypeNames)
    if (d.dtype == t) return d.name;
  return nullptr;
}

void writeJsonString(llvm::raw_ostream &os, llvm::StringRef s) {
  os << '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') os << '\\' << char(c);
    else if (c < 0x20) os << llvm::format("\\u%04x", c);
    else os << char(c);
  }
  os << '"';
}

llvm::Expected<std::string> serializeSafetensorsHeader(const std::vector<SafetensorsEntry> &tensors,
                                                       const std::map<std::string, std::string> &metadata) {
  std::string header;
  llvm::raw_string_ostream os(header);
  os << '{';
  bool first = true;
  if (!metadata.empty()) {
    os << "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      if (it != metadata.begin()) os << ',';
      writeJsonString(os, it->first);
      os << ':';
      writeJsonString(os, it->second);
    }
    os << '}';
    first = false;
  }
  uint64_t offset = 0;
  for (const SafetensorsEntry &e : tensors) {
    const char *dt = safetensorsDType(e.dtype);
    if (!dt) return err("tensor '" + e.name + "': element type " + dtypeName(e.dtype) +
                        " has no safetensors equivalent");
    if (e.name == "__metadata__") return err("a tensor cannot be named '__metadata__' in safetensors");
    auto nbytes = checkedNbytes(e.shape, int64_t(dtypeSize(e.dtype)));
    if (!nbytes) return err("tensor '" + e.name + "': shape " + shapeToString(e.shape) + " is too large");
    if (!first) os << ',';
    first = false;
    writeJsonString(os, e.name);
    os << ":{\"dtype\":\"" << dt << "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i) os << (i ? "," : "") << e.shape[i];
    os << "],\"data_offsets\":[" << offset << ',' << offset + uint64_t(*nbytes) << "]}";
    offset += uint64_t(*nbytes);
  }
  os << '}';
  os.flush();
  // Pad the header with spaces so the data starts 8-byte aligned (as the
  // reference implementation does).
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + header.size());
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  out += header;
  return out;
}

llvm::Expected<std::string> serializeSafetensors(const std::vector<NamedTensor> &tensors,
                                                 const std::map<std::string, std::string> &metadata) {
  std::vector<SafetensorsEntry> entries;
  size_t data = 0;
  for (const NamedTensor &nt : tensors) {
    SafetensorsEntry e;
    e.name = nt.name;
    e.dtype = nt.tensor.dtype();
    e.shape = nt.tensor.shape();
    entries.push_back(std::move(e));
    data += nt.tensor.nbytes();
  }
  auto out = serializeSafetensorsHeader(entries, metadata);
  if (!out) return out.takeError();
  out->reserve(out->size() + data);
  for (const NamedTensor &nt : tensors)
    out->append(static_cast<const char *>(nt.tensor.raw()), nt.tensor.nbytes());
  return out;
}

llvm::Error writeSafetensors(const std::string &path, const std::vector<NamedTensor> &tensors,
                             const std::map<std::string, std::string> &metadata) {
  auto bytes = serializeSafetensors(tensors, metadata);
  if (!bytes) return bytes.takeError();
  return writeFileAtomically(path, *bytes);
}

llvm::Expected<SafetensorsHeader> parseSafetensorsHeader(llvm::StringRef text, uint64_t fileSize,
                                                         const std::string &path) {
  auto json = llvm::json::parse(text);
  if (!json) return err(path + ": bad safetensors header: " + llvm::toString(json.takeError()));
  const llvm::json::Object *obj = json->getAsObject();
  if (!obj) return err(path + ": safetensors header is not a JSON object");
  SafetensorsHeader h;
  h.fileSize = fileSize;
  h.dataStart = 8 + text.size();
  if (h.dataStart > fileSize) return err(path + ": safetensors header runs past the end of the file");
  const uint64_t body = fileSize - h.dataStart;
  for (const auto &kv : *obj) {
    std::string name = kv.first.str();
    if (name == "__metadata__") {
      if (const llvm::json::Object *m = kv.second.getAsObject())
        for (const auto &e : *m)
          if (auto v = e.second.getAsString()) h.metadata[e.first.str()] = v->str();
      continue;
    }
    auto bad = [&](const llvm::Twine &why) { return err(path + ": tensor '" + name + "': " + why); };
    const llvm::json::Object *t = kv.second.getAsObject();
    const llvm::json::Array *shape = t ? t->getArray("shape") : nullptr;
    const llvm::json::Array *offs = t ? t->getArray("data_offsets") : nullptr;
    auto dtName = t ? t->getString("dtype") : llvm::None;
    if (!shape || !offs || !dtName || offs->size() != 2) return bad("needs dtype, shape and data_offsets [begin, end]");
    SafetensorsEntry e;
    e.name = name;
    for (const auto &d : kDTypeNames)
      if (*dtName == d.name) e.dtype = d.dtype;
    if (e.dtype == DType::Undefined) return bad("unsupported dtype " + dtName->str());
    for (const auto &d : *shape) {
      auto v = d.getAsInteger();
      if (!v || *v < 0) return bad("bad shape (dimensions are integers >= 0)");
      e.shape.push_back(*v);
    }
    auto nbytes = checkedNbytes(e.shape, int64_t(dtypeSize(e.dtype)));
    auto b = (*offs)[0].getAsInteger(), end = (*offs)[1].getAsInteger();
    if (!b || !end || *b < 0 || *end < *b) return bad("bad data_offsets (integers, begin <= end)");
    if (!nbytes || uint64_t(*end - *b) != uint64_t(*nbytes))
      return bad("data_offsets [" + llvm::Twine(*b) + ", " + llvm::Twine(*end) + "] hold " + llvm::Twine(*end - *b) +
                 " bytes, its shape " + shapeToString(e.shape) + " of " + dtName->str() + " needs " +
                 (nbytes ? llvm::Twine(*nbytes).str() : std::string("more than 2^63")));
    if (uint64_t(*end) > body)
      return bad("data_offsets [" + llvm::Twine(*b) + ", " + llvm::Twine(*end) + "] lie past the end of the data (" +
                 llvm::Twine(body) + " bytes): the file is truncated or its header is wrong");
    e.begin = h.dataStart + uint64_t(*b);
    e.end = h.dataStart + uint64_t(*end);
    h.entries.push_back(std::move(e));
  }
  std::sort(h.entries.begin(), h.entries.end(),
            [](const SafetensorsEntry &a, const SafetensorsEntry &b) { return a.begin < b.begin; });
  for (size_t i = 1; i < h.entries.size(); ++i)
    if (h.entries[i].begin < h.entries[i - 1].end && h.entries[i].begin != h.entries[i].end)
      return err(path + ": tensors '" + h.entries[i - 1].name + "' and '" + h.entries[i].name +
                 "' overlap in the file: its header is wrong");
  return h;
}

llvm::Expected<SafetensorsHeader> readSafetensorsHeader(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return err(path + ": cannot read: " + std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return err(path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return err(path + ": not a regular file");
  const uint64_t fileSize = uint64_t(st.st_size);
  unsigned char len[8];
  if (fileSize < 8 || ::pread(fd, len, 8, 0) != 8)
    return err(path + ": not a safetensors file (shorter than its 8-byte header length)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  if (n > fileSize - 8)
    return err(path + ": not a safetensors file, or truncated: its header length is " + llvm::Twine(n) +
               " bytes, the file has " + llvm::Twine(fileSize));
  if (n > kMaxSafetensorsHeader)
    return err(path + ": safetensors header of " + llvm::Twine(n) + " bytes is larger than the " +
               llvm::Twine(kMaxSafetensorsHeader >> 20) + " MiB the format allows");
  std::string text(size_t(n), '\0');
  for (size_t got = 0; got < n;) {
    ssize_t r = ::pread(fd, text.data() + got, n - got, off_t(8 + got));
    if (r <= 0) return err(path + ": cannot read its header: " + (r < 0 ? std::strerror(errno) : "short read"));
    got += size_t(r);
  }
  return parseSafetensorsHeader(text, fileSize, path);
}

llvm::Expected<std::vector<NamedTensor>> readSafetensors(const std::string &path) {
  auto h = readSafetensorsHeader(path);
  if (!h) return h.takeError();
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return err(path + ": cannot read: " + buf.getError().message());
  llvm::StringRef data = (*buf)->getBuffer();
  if (data.size() != h->fileSize) return err(path + ": the file changed while it was read");
  std::vector<NamedTensor> out;
  for (const SafetensorsEntry &e : h->entries) {
    Tensor t(e.dtype, e.shape);
    std::memcpy(t.raw(), data.data() + e.begin, t.nbytes());
    out.push_back({e.name, std::move(t)});
  }
  return out;
}

const char *safetensorsDTypeName(DType t) { return safetensorsDType(t); }

} // namespace megac
