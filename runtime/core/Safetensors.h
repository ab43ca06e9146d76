#pragma once
// The safetensors format (Hugging Face): an 8-byte little-endian header
// length, a JSON header {name: {"dtype", "shape", "data_offsets": [begin,
// end]}, "__metadata__": {...}}, then the tensors' bytes. Offsets are
// relative to the end of the header.
#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"

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

// Reads a safetensors file (the dtypes megac has), tensors in file order.
llvm::Expected<std::vector<NamedTensor>> readSafetensors(const std::string &path);

} // namespace megac
