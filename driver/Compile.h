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
// --longest-seq`): GPU bytes grow linearly in seq (boundary activations, the
// loss's rows, the arenas' per-token values), so compiles at seq 64 and 128
// give the estimate, a multiple of 64, which a compile at it confirms (else
// shorter, on the line through seq 64's bytes and the failed compile's, by
// 5% at least; at most 8 times). Where checkpoints may be
// offloaded (--offload-checkpoints auto or N) and the MLP blocks chunked
// (--seq-chunks auto or K), the estimate takes them all offloaded and
// one-token chunks, and the confirming compile must also fit --host-mem, if given:
// the offloaded checkpoints' pinned host memory grows with seq. Also the GPU
// bytes and the pinned checkpoint bytes at that length.
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

} // namespace megac::driver
