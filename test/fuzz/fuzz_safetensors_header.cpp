// Safetensors file bytes (8-byte header length, JSON header, data) ->
// readSafetensorsHeader (which calls parseSafetensorsHeader), readSafetensors,
// and the safetensors WeightReader that `--weights` opens, each tensor read
// and converted to fp32.
#include "FuzzUtil.h"
#include "runtime/core/Safetensors.h"
#include "runtime/weights/WeightFiles.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace megac;
  std::string path = fuzz::writeScratch("model.safetensors", data, size);
  auto h = readSafetensorsHeader(path);
  if (!h) {
    fuzz::discard(h);
    return 0;
  }
  auto all = readSafetensors(path);
  fuzz::discard(all);
  auto source = runtime::openWeightSource(path);
  if (!source) {
    fuzz::discard(source);
    return 0;
  }
  for (int32_t i = 0; i < int32_t((*source)->tensors.size()); ++i) {
    std::vector<float> dst(size_t((*source)->tensors[size_t(i)].numel));
    runtime::WeightReadStats stats;
    fuzz::discard((*source)->read({{i, dst.data()}}, stats));
  }
  return 0;
}
