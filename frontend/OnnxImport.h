#pragma once
// ONNX model file -> ir::Graph. Symbolic dimensions are bound to static
// values here (--batch/--seq bind the first input's two dims; --dim binds any
// name). Types of op results are left unknown: the infer-shapes pass sets them.
#include "ir/Graph.h"

#include <map>
#include <optional>
#include <set>
#include <memory>
#include <string>

namespace megac::frontend {

struct ImportOptions {
  int64_t batch = -1; // binds dim 0 of the first runtime input
  int64_t seq = -1;   // binds dim 1 of the first runtime input
  std::map<std::string, int64_t> dims; // any symbolic dim by name
  // Shapes of the data that will be fed (e.g. from --input files): the first
  // run-time input's, and others by name. They bind symbolic dims too.
  std::optional<Shape> firstInputShape;
  std::map<std::string, Shape> inputShapes;
};

struct ImportStats {
  int64_t ir_version = 0;
  std::string producer;
  std::vector<std::string> dataLessWeights; // weights that came without bytes
  std::set<std::string> missingDataFiles;   // external data files that do not exist
};

llvm::Expected<std::unique_ptr<ir::Graph>> importOnnx(const std::string &path, const ImportOptions &opts,
                                                     ImportStats *stats = nullptr);

} // namespace megac::frontend
