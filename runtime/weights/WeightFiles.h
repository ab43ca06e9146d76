#pragma once
// The weights readers the tools inject into the runtime (runtime/train/
// WeightReader.h). Where pretrained weights come from (`--weights W`): Hugging Face
// safetensors (a file, a model.safetensors.index.json, or a directory as
// save_pretrained writes it), an ONNX file's initializers, or a megac
// checkpoint. A source lists its tensors (name, dtype, shape) from headers
// alone, then reads the ones asked for into fp32 destinations, one file at a
// time: safetensors files are memory-mapped and unmapped shard by shard, so
// loading needs no memory beyond the destinations and one shard's mapping.
#include "runtime/train/WeightReader.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace megac::runtime {

enum class WeightFormat { Safetensors, Onnx, MegacCheckpoint };

// What a --weights path names, by these rules:
// - a directory holding `latest` or `checkpoint.meta` is a megac checkpoint;
// - a directory holding model.safetensors.index.json or *.safetensors is
//   Hugging Face weights (the index where there is one, else the one
//   .safetensors file);
// - a directory that is both, or neither, is an error;
// - a file is an index (.json), safetensors (its 8-byte length and '{'), or
//   ONNX (anything else).
struct WeightsPath {
  WeightFormat format;
  std::string path; // the file (or index) to read; the directory for a checkpoint
};
llvm::Expected<WeightsPath> classifyWeightsPath(const std::string &given);

llvm::Expected<std::unique_ptr<WeightReader>> openWeightSource(const std::string &given);

// The plan's own ONNX model (Plan.model_path): every initializer with its
// data by its exact name (whatever its dtype, so that the runtime can say
// one is not float32), none whose external data file is absent; the model's
// hash must be the plan's. A file that cannot be read is an error, or with
// `allowUnreadable` (--init) a reader of no tensors.
llvm::Expected<std::unique_ptr<WeightReader>> openPlanModel(const plan::Plan &plan, bool allowUnreadable);

// The readers the tools inject into the runtime (TrainLoopOptions::readers):
// openWeightSource for --weights, openPlanModel for the plan's own model.
WeightReaders fileWeightReaders();

} // namespace megac::runtime
