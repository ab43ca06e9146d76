#pragma once
// TensorProto conversion for the frontend: the runtime's, plus the IR's
// external-data reference.
#include "ir/Graph.h"
#include "runtime/core/TensorFile.h"

namespace megac::frontend {

using megac::hasExternalData;
using megac::readTensorFile;
using megac::tensorFromProto;
using megac::tensorToProto;
using megac::writeTensorFile;

llvm::Expected<ir::ExternalData> externalRef(const onnx::TensorProto &p, const std::string &what);

} // namespace megac::frontend
