#pragma once
// A checkpoint's trained parameters as named tensors (for export), read
// without a plan: names, shapes and offsets come from checkpoint.meta.
#include "runtime/core/Safetensors.h"

#include "plan.pb.h"

namespace megac::runtime {

struct CheckpointWeights {
  std::string stepDir;        // the step directory read
  plan::CheckpointMeta meta;
  std::vector<NamedTensor> params; // f32, in the checkpoint's (plan) order
};

// `dir` is a checkpoint directory (its `latest` is followed) or a step directory.
llvm::Expected<CheckpointWeights> readCheckpointWeights(const std::string &dir);

} // namespace megac::runtime
