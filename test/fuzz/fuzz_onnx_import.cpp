// ONNX model bytes -> parse and import (frontend::importOnnx), nothing after.
// The fastest model target: the one for long runs (README.md).
#include "FuzzUtil.h"
#include "frontend/OnnxImport.h"
#include "ProtoMutator.h"
#include "onnx_reflect.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = megac::fuzz::writeScratch("model.onnx", data, size);
  megac::frontend::ImportOptions opts;
  opts.batch = 2; // as `megac import --batch 2 --seq 8` binds the first input
  opts.seq = 8;
  megac::frontend::ImportStats stats;
  auto g = megac::frontend::importOnnx(path, opts, &stats);
  megac::fuzz::discard(g);
  return 0;
}

// Half the mutations change one field of the parsed model (ProtoMutator.h).
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize, unsigned seed) {
  return megac::fuzz::mutateProto<megac_fuzz_onnx::ModelProto>(data, size, maxSize, seed);
}
