#pragma once
// Checkpoints: DIR/step-NNNNNNNN/ with checkpoint.meta, params.f32,
// adam_m.f32, adam_v.f32, and DIR/latest naming the newest. Each file is
// written to a temporary name, fsynced and renamed; the step directory is
// renamed into place last, then `latest` is replaced atomically: a crash at
// any point leaves the previous checkpoint intact and `latest` pointing at a
// complete one.
#include "runtime/train/Trainer.h"

namespace megac::runtime {

struct CheckpointInfo {
  int64_t step = 0;
  int64_t totalSteps = 0;
  uint64_t seed = 0;
  int64_t dataIndex = 0;
  int64_t microBatchesPerStep = 1;
  plan::Optimizer optimizer;
  // Where the run's initial weights came from (--weights; empty: the model
  // file), and which of the source's tensors each parameter took.
  std::string weightsSource;
  std::vector<std::pair<std::string, std::string>> weightNames;
};

// Writes the state into dir/step-<step>/ and points dir/latest at it; keeps
// the newest `keep` step directories.
llvm::Error saveCheckpoint(const std::string &dir, const plan::Plan &plan, const HostState &state,
                           const CheckpointInfo &info, int keep = 2);

// Loads dir/latest (or dir itself when it is a step directory). The
// parameter names and shapes must match the plan's.
llvm::Expected<CheckpointInfo> loadCheckpoint(const std::string &dir, const plan::Plan &plan, HostState &state);

// The step directory that dir/latest names (or dir itself).
llvm::Expected<std::string> resolveCheckpoint(const std::string &dir);

// Reads a checkpoint's metadata and parameter array without a plan (export).
llvm::Expected<plan::CheckpointMeta> readCheckpointMeta(const std::string &stepDir);
llvm::Expected<std::vector<float>> readCheckpointArray(const std::string &stepDir, const std::string &file,
                                                       int64_t elements);

} // namespace megac::runtime
