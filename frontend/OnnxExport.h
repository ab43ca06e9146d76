#pragma once
// Writes an ONNX model with new values for some of its weights (megac export):
// each named tensor replaces the initializer of that name, or, where the
// weight is a graph input without data (shapes-only models trained with
// --init), becomes an initializer and leaves graph.input. Everything else is
// kept as it was, external data read into the new file.
#include "runtime/core/Safetensors.h"

#include <string>
#include <vector>

namespace megac::frontend {

struct OnnxExportOptions {
  // Above this many initializer bytes in all, every initializer of at least
  // externalMinBytes goes to `<out>.data` (protobuf messages stop at 2 GB).
  int64_t externalDataAbove = int64_t(1800) * 1000 * 1000;
  int64_t externalMinBytes = 1024;
  int64_t externalAlignment = 64; // offsets in the data file
};

struct OnnxExportResult {
  int replaced = 0;         // initializers given new values
  int promotedInputs = 0;   // data-less graph inputs made initializers
  int64_t initializerBytes = 0;
  std::string dataPath;     // the external data file, when one was written
  int externalTensors = 0;
};

// Validates everything before writing: on error nothing is written. Files are
// written atomically, the data file before the model.
llvm::Expected<OnnxExportResult> exportOnnxWithWeights(const std::string &modelPath,
                                                       const std::vector<NamedTensor> &weights,
                                                       const std::string &outPath,
                                                       const OnnxExportOptions &opts = {});

} // namespace megac::frontend
