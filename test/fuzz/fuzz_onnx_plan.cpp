// ONNX model bytes -> import, the import and loss pipelines (specialize,
// fusions, autodiff, partition-units), codegen, the memory plan, the
// streaming schedule and the plan checker: `megac compile --batch 1 --seq 8`
// with its default flags, through driver::compileForTraining as
// tools/megac/TrainCommands.cpp calls it.
#include "FuzzUtil.h"
#include "driver/Compile.h"
#include "codegen/RecomputePolicy.h"
#include "codegen/ResidentPolicy.h"

#include <cstdlib>
#include "ProtoMutator.h"
#include "onnx_reflect.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace megac;
  std::string path = fuzz::writeScratch("model.onnx", data, size);
  frontend::ImportOptions import;
  import.batch = 1;
  import.seq = 8;
  passes::PassOptions passOpts; // megac compile's defaults (fused loss, ignore -100)
  // Folding may materialize a 1 GiB tensor by default, which is allowed and
  // slow; 16 MiB keeps each input within a second or so (README.md).
  passOpts.foldLimit = int64_t(1) << 22;
  codegen::CodegenOptions co;
  co.compute = "bf16"; // megac compile's default
  auto recompute = codegen::parseRecompute("all");
  auto resident = codegen::parseResidentUnits("auto");
  if (!recompute || !resident) std::abort();
  co.schedule.recompute = *recompute;
  co.schedule.residentUnits = *resident;
  auto plan = driver::compileForTraining(path, import, passOpts, co);
  fuzz::discard(plan);
  return 0;
}

// Half the mutations change one field of the parsed model (ProtoMutator.h).
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize, unsigned seed) {
  return megac::fuzz::mutateProto<megac_fuzz_onnx::ModelProto>(data, size, maxSize, seed);
}
