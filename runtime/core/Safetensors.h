#pragma once
// The safetensors format (Hugging Face): an 8-byte little-endian header
// length, a JSON header {name: {"dtype", "shape", "data_offsets": [begin,
// end]}, "__metadata__": {...}}, then the tensors' bytes. Offsets are
// relative to the end of the header.
#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>
#include <vector>

namespace megac {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// Writes the tensors in the given order (atomically). `metadata` goes into
// "__metadata__" (string values only, as the format requires).
llvm::Error writeSafetensors(const std::string &path, const std::vector<NamedTensor> &tensors,
                             const std::map<std::string, std::string> &metadata = {{"format", "pt"}});

// The serialized bytes writeSafetensors writes.
llvm::Expected<std::string> serializeSafetensors(const std::vector<NamedTensor> &tensors,
                                                 const std::map<std::string, std::string> &metadata);

// One tensor of a safetensors header. Offsets are from the start of the
// file (the header's data_offsets plus the data's start).
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::Undefined;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

struct SafetensorsHeader {
  uint64_t fileSize = 0;
  uint64_t dataStart = 0;                     // 8 + the header's length
  std::vector<SafetensorsEntry> entries;      // in file order
  std::map<std::string, std::string> metadata; // "__metadata__"
};

// The largest header megac reads (the format's own reader refuses past 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

// The bytes before the tensor data of a file holding `tensors` (name, dtype,
// shape; their data one after another in this order): the 8-byte length and
// the JSON header, padded with spaces so the data starts 8-byte aligned. For
// writers that stream the data after it; serializeSafetensors uses it.
llvm::Expected<std::string> serializeSafetensorsHeader(const std::vector<SafetensorsEntry> &tensors,
                                                       const std::map<std::string, std::string> &metadata);

// Reads and checks a safetensors file's header without reading its data:
// the header's length against the file's, each tensor's dtype, shape and
// data_offsets (the byte count its shape implies, inside the file, no two
// overlapping), all before anything is allocated for the tensors.
llvm::Expected<SafetensorsHeader> readSafetensorsHeader(const std::string &path);

// Checks the JSON header of a file of `fileSize` bytes (`path` names it in errors).
llvm::Expected<SafetensorsHeader> parseSafetensorsHeader(llvm::StringRef json, uint64_t fileSize,
                                                         const std::string &path);

// Reads a safetensors file (the dtypes megac has), tensors in file order.
llvm::Expected<std::vector<NamedTensor>> readSafetensors(const std::string &path);

// A JSON string literal of `s` (quotes, backslashes and control characters escaped).
void writeJsonString(llvm::raw_ostream &os, llvm::StringRef s);

// The safetensors name of a dtype ("F32", "BF16", ...), or nullptr.
const char *safetensorsDTypeName(DType t);

} // namespace megac
