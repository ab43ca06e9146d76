#pragma once
// The whole compiler, from an ONNX file (or textual IR) to a training plan:
// import, the import pipeline, append-loss, fuse-linear-cross-entropy,
// partition-units, codegen, the arenas and the streaming schedule. Fails, with the numbers, when the plan
// exceeds codegen.schedule's GPU or host budget, and (as an internal error)
// when the plan checker rejects the result.
#include "codegen/BuildPlan.h"
#include "frontend/OnnxImport.h"
#include "passes/Pass.h"

namespace megac::codegen {

llvm::Expected<plan::Plan> compileForTraining(const std::string &modelPath, const frontend::ImportOptions &import,
                                              const passes::PassOptions &passes, const CodegenOptions &codegen);

} // namespace megac::codegen
