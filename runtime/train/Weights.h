#pragma once
// Initial weights for a plan: the plan's own model's weights by their exact
// names, pretrained weights given with --weights matched to the plan's
// parameters by name (runtime/train/NameMatch.h), or Hugging Face-style
// initialization (--init) for weights that have no data. Both are read
// through the readers the caller passes (runtime/train/WeightReader.h; the
// tools pass runtime/weights/WeightFiles.h's).
#include "runtime/train/Trainer.h"
#include "runtime/train/WeightReader.h"

#include <utility>

namespace megac::runtime {

struct WeightOptions {
  std::string weightsPath;  // --weights; empty: the plan's model file
  bool init = false;        // without --weights: initialize weights the model file has no data for
  bool initMissing = false; // with --weights: initialize the parameters the weights lack
  uint64_t seed = 0;
};

struct LoadedWeights {
  int initialized = 0;             // parameters initialized rather than read
  std::vector<std::string> report; // lines to print: source, name matching, GB/s, what was initialized
  std::string source;              // --weights as given (empty: the plan's model)
  std::vector<std::pair<std::string, std::string>> names; // plan parameter -> the source's tensor
};

llvm::Expected<LoadedWeights> loadInitialWeights(const plan::Plan &plan, HostState &state, const WeightOptions &opts,
                                                 const WeightReaders &readers);

// The FNV-1a hash codegen records over the parameters' bytes, in plan order.
uint64_t hashParameters(const plan::Plan &plan, const HostState &state);

// Parameters initialized the way --init does (by the plan's init kind, from
// the seed and the parameter's index, whatever the number of threads).
void initializeParameter(const plan::Parameter &p, int32_t index, float *dst, uint64_t seed);

} // namespace megac::runtime
