#include "runtime/train/CheckpointWeights.h"

#include "runtime/train/Checkpoint.h"

#include <cstring>
#include <set>

namespace megac::runtime {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

llvm::Expected<CheckpointWeights> readCheckpointWeights(const std::string &dir) {
  CheckpointWeights w;
  auto stepDir = resolveCheckpoint(dir);
  if (!stepDir) return stepDir.takeError();
  w.stepDir = *stepDir;
  auto meta = readCheckpointMeta(w.stepDir);
  if (!meta) return meta.takeError();
  w.meta = std::move(*meta);
  int64_t elements = w.meta.host_elements();
  if (elements < 0) return err(w.stepDir + ": corrupt checkpoint metadata (negative size)");
  std::set<std::string> seen;
  for (const auto &p : w.meta.params()) {
    if (!seen.insert(p.name()).second)
      return err(w.stepDir + ": corrupt checkpoint metadata (parameter '" + p.name() + "' listed twice)");
    int64_t n = 1;
    for (int64_t d : p.shape()) {
      if (d < 0 || (d > 0 && n > elements / d))
        return err(w.stepDir + ": corrupt checkpoint metadata (parameter '" + p.name() + "' has a bad shape)");
      n *= d;
    }
    if (p.host_offset() < 0 || p.host_offset() > elements - n)
      return err(w.stepDir + ": corrupt checkpoint metadata (parameter '" + p.name() +
                 "' lies outside params.f32)");
  }
  // Verified (checksum; every parameter finite) as it is read.
  auto array = readCheckpointArray(w.stepDir, w.meta, "params.f32");
  if (!array) return array.takeError();
  for (const auto &p : w.meta.params()) {
    Shape shape(p.shape().begin(), p.shape().end());
    Tensor t(DType::F32, shape);
    std::memcpy(t.raw(), array->data() + p.host_offset(), t.nbytes());
    w.params.push_back({p.name(), std::move(t)});
  }
  return w;
}

} // namespace megac::runtime
