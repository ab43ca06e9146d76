#pragma once
// Initial weights for a plan: the bytes of the ONNX file's initializers (or
// another ONNX file given with --weights), or Hugging Face-style
// initialization (--init) for weights that have no data.
#include "runtime/train/Trainer.h"

namespace megac::runtime {

struct WeightOptions {
  std::string onnxPath; // empty: the plan's model_path
  bool init = false;    // initialize weights that have no data
  uint64_t seed = 0;
};

// Returns how many parameters were initialized rather than read.
llvm::Expected<int> loadInitialWeights(const plan::Plan &plan, HostState &state, const WeightOptions &opts);

// The FNV-1a hash codegen records over the parameters' bytes, in plan order.
uint64_t hashParameters(const plan::Plan &plan, const HostState &state);

} // namespace megac::runtime
