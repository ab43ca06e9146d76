#pragma once
// The training loop behind `megac run` / `megac train`: data, schedule,
// progress lines, the metrics log, evaluation and checkpoints.
#include "runtime/train/Checkpoint.h"
#include "runtime/train/Data.h"
#include "runtime/train/Trainer.h"
#include "runtime/train/WeightReader.h"

#include <optional>

namespace megac::runtime {

struct TrainLoopOptions {
  int64_t steps = 0;             // total optimizer steps (a resumed run continues to it)
  std::string data, text;        // token file or text file
  std::string mask;              // --mask: one uint8 per token of data, 0 = not a counted target
  std::string valData;           // held-out token file (same format as data)
  std::string valMask;           // --val-mask: the same for valData
  bool valIsText = false;
  int64_t evalEvery = 0;
  int64_t evalBatches = 4;
  std::optional<Tensor> fixedTokens, fixedTargets; // --input/--targets: the same batch every step
  std::string checkpointDir;
  int64_t checkpointEvery = 0;
  std::string resume;            // checkpoint dir to resume from
  std::string weights;           // --weights: pretrained weights
  WeightReaders readers;         // how --weights and the plan's model are read: the caller's (the tools inject runtime/weights/)
  bool init = false;             // initialize weights the model file has no data for
  bool initMissing = false;      // initialize parameters --weights lacks
  uint64_t seed = 0;
  std::string logPath;           // metrics.jsonl
  bool quiet = false;
};

// Runs to completion; prints one progress line per step to stdout. Returns
// the losses of the steps run (the first step's loss first).
llvm::Expected<std::vector<double>> runTraining(Trainer &trainer, const TrainLoopOptions &opts);

} // namespace megac::runtime
