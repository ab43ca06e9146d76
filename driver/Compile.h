#pragma once
// The compiler driver, from an ONNX file (or textual IR) to a training plan
// (it sits above codegen, which does not see the frontend):
// import, the import pipeline, append-loss, fuse-linear-cross-entropy,
// partition-units, codegen, the arenas and the streaming schedule. Fails, with the numbers, when the plan
// exceeds codegen.schedule's GPU or host budget, and (as an internal error)
// when the plan checker rejects the result.
#include "codegen/BuildPlan.h"
#include "frontend/OnnxImport.h"
#include "passes/Pass.h"

namespace megac::driver {

llvm::Expected<plan::Plan> compileForTraining(const std::string &modelPath, const frontend::ImportOptions &import,
                                              const passes::PassOptions &passes, const codegen::CodegenOptions &codegen);

// The longest seq that fits the GPU budget at batch 1 (`megac compile
// --longest-seq`, and the over-budget error at batch 1), to within 1%: the
// slope of GPU bytes a token, from compiles at seq 64 and 128 (and at 8,192
// and 16,384 where the line reaches past 32,768) with every checkpoint that
// may leave offloaded and auto's most MLP slices, gives the first length;
// compiles as the flags ask then close in (5% longer while all fit, 10%
// shorter while none does, then bisection; 8 at most). A length fits where
// its plan fits the GPU budget and --host-mem, if given (offloaded
// checkpoints take pinned host memory). Also the GPU bytes, the pinned
// checkpoint bytes and the slices of the plan at that length.
struct LongestSeq {
  int64_t seq = 0;           // 0: not even seq 64 fits
  int64_t deviceBytes = 0;   // of the plan at `seq`
  int64_t pinnedCheckpointBytes = 0; // of the plan at `seq`: its offloaded checkpoints
  int64_t sequenceChunks = 1;        // of the plan at `seq`: its MLP blocks' slices (--seq-chunks)
  int64_t bytesPerToken = 0; // between the two longest lengths that fit (else the short estimate)
  int compiles = 0;
};
llvm::Expected<LongestSeq> longestSeqAtBatch1(const std::string &modelPath, const frontend::ImportOptions &import,
                                              const passes::PassOptions &passes, const codegen::CodegenOptions &codegen);
// How that length fits, for messages: ", with 0.06 GiB of checkpoints
// offloaded to pinned host memory, the MLP blocks in 64 slices of the
// sequence" (and, with --seq-chunks auto, "(or the fewer that auto takes
// where they fit)"); empty where neither applies.
std::string howItFits(const LongestSeq &l, bool autoChunks);

} // namespace megac::driver
