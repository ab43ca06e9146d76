#pragma once
// ONNX TensorProto <-> Tensor, and .pb tensor files (the ONNX test-data
// convention: one serialized TensorProto per file).
#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"

#include <string>

namespace onnx {
class TensorProto;
}
namespace google::protobuf {
class MessageLite;
}

namespace megac {

// Converts a TensorProto with inline data; `what` names the tensor in errors.
llvm::Expected<Tensor> tensorFromProto(const onnx::TensorProto &p, const std::string &what);
bool hasExternalData(const onnx::TensorProto &p);

struct ExternalLocation {
  std::string location; // relative to the model's directory
  int64_t offset = 0;
  int64_t length = -1;  // -1: to the end of the file
};
llvm::Expected<ExternalLocation> externalLocation(const onnx::TensorProto &p, const std::string &what);
// Reads `bytes` bytes for `what` from baseDir/location at offset.
llvm::Error readExternal(const std::string &baseDir, const ExternalLocation &loc, const std::string &what,
                         void *dst, int64_t bytes);

// Parses a whole serialized message past protobuf's default 64 MiB limit
// (ONNX graphs and plans of large models); false if it does not parse.
bool parseWholeMessage(llvm::StringRef bytes, google::protobuf::MessageLite &m);

void tensorToProto(const Tensor &t, const std::string &name, onnx::TensorProto &p);

llvm::Expected<Tensor> readTensorFile(const std::string &path);
// Written atomically (temporary file, fsync, rename).
llvm::Error writeTensorFile(const std::string &path, const Tensor &t, const std::string &name = "");
// Writes bytes to path atomically: path.tmp, fsync, rename.
llvm::Error writeFileAtomically(const std::string &path, llvm::StringRef bytes);

} // namespace megac
