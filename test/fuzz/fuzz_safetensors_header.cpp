// Safetensors file bytes (8-byte header length, JSON header, data) ->
// readSafetensorsHeader (which calls parseSafetensorsHeader), readSafetensors,
// and the safetensors WeightReader that `--weights` opens, each tensor read
// and converted to fp32.
#include "FuzzUtil.h"
#include "ReadEveryTensor.h"
#include "runtime/core/Safetensors.h"

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
  fuzz::readEveryTensor(path);
  return 0;
}
