#pragma once
// Shared by the fuzz targets whose files are weight sources (a safetensors
// file, a checkpoint): opens the source at `path` through the weight reader
// megac run uses, and reads every tensor it lists.
#include "FuzzUtil.h"
#include "runtime/weights/WeightFiles.h"

#include <string>
#include <vector>

namespace megac::fuzz {

inline void readEveryTensor(const std::string &path) {
  auto source = runtime::openWeightSource(path);
  if (!source) {
    discard(source);
    return;
  }
  for (int32_t i = 0; i < int32_t((*source)->tensors.size()); ++i) {
    std::vector<float> dst(size_t((*source)->tensors[size_t(i)].numel));
    runtime::WeightReadStats stats;
    discard((*source)->read({{i, dst.data()}}, stats));
  }
}

} // namespace megac::fuzz
