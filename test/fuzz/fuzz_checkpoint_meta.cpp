// checkpoint.meta bytes -> the readers a checkpoint directory goes through
// without a plan: runtime::readCheckpointMeta, readCheckpointWeights (what
// `megac export` reads) and the checkpoint WeightReader (`--weights DIR`),
// each tensor read. The step directory holds a fixed params.f32 of 16 floats
// beside the fuzzed meta, so the sizes the meta claims meet a real file.
#include "FuzzUtil.h"
#include "ReadEveryTensor.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/CheckpointWeights.h"

#include "ProtoMutator.h"
#include "plan.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace megac;
  static const std::string dir = [] {
    float params[16];
    for (int i = 0; i < 16; ++i) params[i] = 0.25f * float(i);
    fuzz::writeScratch("params.f32", reinterpret_cast<const uint8_t *>(params), sizeof params);
    return fuzz::Scratch::get().dir();
  }();
  fuzz::writeScratch("checkpoint.meta", data, size);
  auto meta = runtime::readCheckpointMeta(dir);
  if (!meta) {
    fuzz::discard(meta);
    return 0;
  }
  auto weights = runtime::readCheckpointWeights(dir);
  fuzz::discard(weights);
  fuzz::readEveryTensor(dir);
  return 0;
}

// Half the mutations change one field of the parsed meta (ProtoMutator.h).
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize, unsigned seed) {
  return megac::fuzz::mutateProto<megac::plan::CheckpointMeta>(data, size, maxSize, seed, "MEGACCKP");
}
