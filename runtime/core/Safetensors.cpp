#include "runtime/core/Safetensors.h"

#include "runtime/core/TensorFile.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>
#include <optional>

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

static void writeJsonString(llvm::raw_ostream &os, llvm::StringRef s) {
  os << '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') os << '\\' << char(c);
    else if (c < 0x20) os << llvm::format("\\u%04x", c);
    else os << char(c);
  }
  os << '"';
}

llvm::Expected<std::string> serializeSafetensors(const std::vector<NamedTensor> &tensors,
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
  size_t offset = 0;
  for (const NamedTensor &nt : tensors) {
    const char *dt = safetensorsDType(nt.tensor.dtype());
    if (!dt) return err("tensor '" + nt.name + "': element type " + dtypeName(nt.tensor.dtype()) +
                        " has no safetensors equivalent");
    if (nt.name == "__metadata__") return err("a tensor cannot be named '__metadata__' in safetensors");
    if (!first) os << ',';
    first = false;
    writeJsonString(os, nt.name);
    os << ":{\"dtype\":\"" << dt << "\",\"shape\":[";
    for (size_t i = 0; i < nt.tensor.shape().size(); ++i) os << (i ? "," : "") << nt.tensor.shape()[i];
    os << "],\"data_offsets\":[" << offset << ',' << offset + nt.tensor.nbytes() << "]}";
    offset += nt.tensor.nbytes();
  }
  os << '}';
  os.flush();
  // Pad the header with spaces so the data starts 8-byte aligned (as the
  // reference implementation does).
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + header.size() + offset);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  out += header;
  for (const NamedTensor &nt : tensors)
    out.append(static_cast<const char *>(nt.tensor.raw()), nt.tensor.nbytes());
  return out;
}

llvm::Error writeSafetensors(const std::string &path, const std::vector<NamedTensor> &tensors,
                             const std::map<std::string, std::string> &metadata) {
  auto bytes = serializeSafetensors(tensors, metadata);
  if (!bytes) return bytes.takeError();
  return writeFileAtomically(path, *bytes);
}

llvm::Expected<std::vector<NamedTensor>> readSafetensors(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return err(path + ": cannot read: " + buf.getError().message());
  llvm::StringRef data = (*buf)->getBuffer();
  if (data.size() < 8) return err(path + ": not a safetensors file (too short)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(data[i])) << (8 * i);
  if (n > data.size() - 8) return err(path + ": not a safetensors file (header length past the end)");
  auto json = llvm::json::parse(data.substr(8, n));
  if (!json) return err(path + ": bad safetensors header: " + llvm::toString(json.takeError()));
  const llvm::json::Object *obj = json->getAsObject();
  if (!obj) return err(path + ": safetensors header is not a JSON object");
  llvm::StringRef body = data.substr(8 + n);
  struct Entry {
    uint64_t begin;
    NamedTensor nt;
  };
  std::vector<Entry> entries;
  for (const auto &kv : *obj) {
    std::string name = kv.first.str();
    if (name == "__metadata__") continue;
    const llvm::json::Object *t = kv.second.getAsObject();
    const llvm::json::Array *shape = t ? t->getArray("shape") : nullptr;
    const llvm::json::Array *offs = t ? t->getArray("data_offsets") : nullptr;
    auto dtName = t ? t->getString("dtype") : llvm::None;
    if (!shape || !offs || !dtName || offs->size() != 2)
      return err(path + ": tensor '" + name + "': needs dtype, shape and data_offsets");
    std::optional<DType> dt;
    for (const auto &d : kDTypeNames)
      if (*dtName == d.name) dt = d.dtype;
    if (!dt) return err(path + ": tensor '" + name + "': unsupported dtype " + dtName->str());
    Shape s;
    for (const auto &d : *shape) {
      auto v = d.getAsInteger();
      if (!v || *v < 0) return err(path + ": tensor '" + name + "': bad shape");
      s.push_back(*v);
    }
    auto b = (*offs)[0].getAsInteger(), e = (*offs)[1].getAsInteger();
    Tensor tensor(*dt, s);
    if (!b || !e || *b < 0 || *e < *b || uint64_t(*e) > body.size() || size_t(*e - *b) != tensor.nbytes())
      return err(path + ": tensor '" + name + "': data_offsets do not fit its shape or the file");
    std::memcpy(tensor.raw(), body.data() + *b, tensor.nbytes());
    entries.push_back({uint64_t(*b), {name, std::move(tensor)}});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry &a, const Entry &b) { return a.begin < b.begin; });
  std::vector<NamedTensor> out;
  for (Entry &e : entries) out.push_back(std::move(e.nt));
  return out;
}

} // namespace megac
