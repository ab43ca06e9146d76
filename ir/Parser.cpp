#include "ir/Parser.h"

namespace megac::ir {

llvm::Expected<std::unique_ptr<Graph>> parseGraph(llvm::StringRef text, llvm::StringRef source) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "IR parser not implemented yet");
}

} // namespace megac::ir
