#include "frontend/TensorProto.h"

namespace megac::frontend {

llvm::Expected<ir::ExternalData> externalRef(const onnx::TensorProto &p, const std::string &what) {
  auto loc = externalLocation(p, what);
  if (!loc) return loc.takeError();
  return ir::ExternalData{loc->location, loc->offset, loc->length};
}

} // namespace megac::frontend
