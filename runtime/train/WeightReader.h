#pragma once
// The one interface through which the runtime reads initial weights. A
// reader lists its tensors (name, dtype, shape) and reads the ones asked for
// into fp32 destinations; which file formats exist (ONNX, safetensors, megac
// checkpoints: runtime/weights/) is the tools' business: they construct the
// readers and pass them in (WeightReaders), so the runtime knows none.
//
// A reader lists rather than answers one name at a time because --weights
// matches names (Hugging Face renames, tied heads: NameMatch.h) over the
// whole list, and reads in batches so that a reader can go file by file.
#include "runtime/core/Tensor.h"
#include "runtime/train/NameMatch.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace megac::plan {
class Plan;
}

namespace megac::runtime {

struct SourceTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  int64_t numel = 0;
  int32_t file = 0;   // index into WeightReader::files
  uint64_t begin = 0; // byte offset of its data in that file (where the reader maps files)
};

struct WeightReadStats {
  int64_t bytes = 0; // bytes of the files' tensor data read
  int files = 0;     // files opened
  double seconds = 0;
};

class WeightReader {
public:
  virtual ~WeightReader() = default;
  std::string given;               // the path as the user gave it (named in errors)
  std::vector<std::string> files;  // the files holding data
  std::vector<SourceTensor> tensors;

  // "safetensors, 2 files, BF16" / "ONNX initializers" / "megac checkpoint step 40".
  virtual std::string describe() const = 0;
  // Reads tensors[i] into dst (tensors[i].numel floats) for each (i, dst),
  // converting to fp32; an error names the file and the tensor.
  virtual llvm::Error read(std::vector<std::pair<int32_t, float *>> wanted, WeightReadStats &stats) = 0;
};

// What the tools inject: how to open `--weights PATH`, and how to open the
// plan's own model (its hash checked against the plan). With `allowUnreadable`
// (--init), a model file that cannot be read gives a reader of no tensors, so
// that every parameter is initialized; otherwise it is an error.
struct WeightReaders {
  std::function<llvm::Expected<std::unique_ptr<WeightReader>>(const std::string &path)> openWeights;
  std::function<llvm::Expected<std::unique_ptr<WeightReader>>(const plan::Plan &plan, bool allowUnreadable)> openModel;
};

// Matches `wanted` to the reader's tensors by name (runtime/train/NameMatch.h)
// and reads each matched tensor into dsts[i] (fp32, wanted[i]'s elements);
// a tensor holding NaN or Inf is an error naming it.
struct MatchedLoad {
  NameMatch match;
  WeightReadStats stats;
};
llvm::Expected<MatchedLoad> loadMatched(WeightReader &source, const std::vector<WantedTensor> &wanted,
                                        const std::vector<float *> &dsts, const NameMatchOptions &opts);

// "loaded 21 of 21 parameters (2.47 GB read from 2 files in 1.10 s, 2.25 GB/s)".
std::string loadSummary(int32_t loaded, size_t total, const char *noun, const WeightReadStats &stats);

} // namespace megac::runtime
