#pragma once
// Where pretrained weights come from (`--weights W`): Hugging Face
// safetensors (a file, a model.safetensors.index.json, or a directory as
// save_pretrained writes it), an ONNX file's initializers, or a megac
// checkpoint. A source lists its tensors (name, dtype, shape) from headers
// alone, then reads the ones asked for into fp32 destinations, one file at a
// time: safetensors files are memory-mapped and unmapped shard by shard, so
// loading needs no memory beyond the destinations and one shard's mapping.
#include "runtime/core/Tensor.h"
#include "runtime/train/NameMatch.h"

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

struct SourceTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  int64_t numel = 0;
  int32_t file = 0;   // index into WeightSource::files
  uint64_t begin = 0; // byte offset of its data in that file (safetensors, checkpoint)
};

struct WeightReadStats {
  int64_t bytes = 0; // bytes of the files' tensor data read
  int files = 0;     // files opened
  double seconds = 0;
};

class WeightSource {
public:
  virtual ~WeightSource() = default;
  std::string given;               // the path as the user gave it
  WeightFormat format = WeightFormat::Onnx;
  std::vector<std::string> files;  // the files holding data
  std::vector<SourceTensor> tensors;

  // "safetensors, 2 files, BF16" / "ONNX initializers" / "megac checkpoint step 40".
  virtual std::string describe() const = 0;
  // Reads tensors[i] into dst (tensors[i].numel floats) for each (i, dst),
  // converting F16/BF16 (and F64) to fp32.
  virtual llvm::Error read(std::vector<std::pair<int32_t, float *>> wanted, WeightReadStats &stats) = 0;
};

llvm::Expected<std::unique_ptr<WeightSource>> openWeightSource(const std::string &given);

// Matches `wanted` to the source's tensors by name (runtime/train/NameMatch.h)
// and reads each matched tensor into dsts[i] (fp32, wanted[i]'s elements);
// a tensor holding NaN or Inf is an error naming it.
struct MatchedLoad {
  NameMatch match;
  WeightReadStats stats;
};
llvm::Expected<MatchedLoad> loadMatched(WeightSource &source, const std::vector<WantedTensor> &wanted,
                                        const std::vector<float *> &dsts, const NameMatchOptions &opts);

// "loaded 21 of 21 parameters (2.47 GB read from 2 files in 1.10 s, 2.25 GB/s)".
std::string loadSummary(int32_t loaded, size_t total, const char *noun, const WeightReadStats &stats);

} // namespace megac::runtime
