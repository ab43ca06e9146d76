#pragma once
// ONNX TensorProto <-> Tensor, and .pb tensor files (the ONNX test-data
// convention: one serialized TensorProto per file).
#include "ir/Graph.h"
#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"

#include <string>

namespace onnx {
class TensorProto;
}

namespace megac::frontend {

// Converts a TensorProto with inline data. Protos with external data are
// described by externalRef() instead; `what` names the tensor in errors.
llvm::Expected<Tensor> tensorFromProto(const onnx::TensorProto &p, const std::string &what);
bool hasExternalData(const onnx::TensorProto &p);
llvm::Expected<ir::ExternalData> externalRef(const onnx::TensorProto &p, const std::string &what);

void tensorToProto(const Tensor &t, const std::string &name, onnx::TensorProto &p);

llvm::Expected<Tensor> readTensorFile(const std::string &path);
llvm::Error writeTensorFile(const std::string &path, const Tensor &t, const std::string &name = "");

} // namespace megac::frontend
