#pragma once
// Parses the textual IR that ir/Printer.h prints.
#include "ir/Graph.h"

#include <memory>

namespace megac::ir {

// `source` names the text in errors ("file.mir:12:5: expected ...").
llvm::Expected<std::unique_ptr<Graph>> parseGraph(llvm::StringRef text, llvm::StringRef source = "<text>");

} // namespace megac::ir
