#pragma once
// Passes over ir::Graph. Each pass has one job and a name; `megac opt
// --pass=NAME` runs one alone, so each has its own lit test.
#include "ir/Graph.h"

#include <string>
#include <vector>

namespace megac::passes {

struct PassOptions {
  std::string trainable; // regex: initializers forced to be parameters
  std::string frozen;    // regex: initializers forced to be constants
  // Largest tensor (elements) that folding may materialize.
  int64_t foldLimit = int64_t(1) << 28;
  // Target value that the loss ignores (as torch's cross_entropy).
  int64_t ignoreIndex = -100;
  // Whether the compile pipeline fuses the head's product into the loss
  // (fuse-linear-cross-entropy); off: the [tokens, vocab] logits exist whole.
  bool fuseLinearCrossEntropy = true;
  // chunk-sequence: the MLP blocks run over this many slices of the
  // sequence (1: whole); it must divide seq.
  int64_t sequenceChunks = 1;
};

using PassFn = llvm::Error (*)(ir::Graph &, const PassOptions &);

struct PassInfo {
  const char *name;
  const char *description;
  PassFn run;
};

const std::vector<PassInfo> &allPasses();
const PassInfo *lookupPass(llvm::StringRef name);
llvm::Error runPass(ir::Graph &g, llvm::StringRef name, const PassOptions &opts);

// The passes that turn an imported ONNX graph into static, folded compute.
const std::vector<std::string> &importPipeline();
// What training adds to an imported graph before partitioning: the loss and
// the rewrites of the products around it.
std::vector<std::string> lossPipeline(const PassOptions &opts);
llvm::Error runPipeline(ir::Graph &g, const std::vector<std::string> &names, const PassOptions &opts);

// Pass entry points (one file each).
llvm::Error classifyParams(ir::Graph &g, const PassOptions &opts);
llvm::Error specialize(ir::Graph &g, const PassOptions &opts);
llvm::Error lowerSequences(ir::Graph &g, const PassOptions &opts);
llvm::Error foldNanGuards(ir::Graph &g, const PassOptions &opts);
llvm::Error eliminateDeadCode(ir::Graph &g, const PassOptions &opts);
// Marks dead every op none of whose results reaches `roots` (no renumbering).
void markUnusedOpsDead(ir::Graph &g, const std::vector<ir::ValueId> &roots);
llvm::Error fuseAttention(ir::Graph &g, const PassOptions &opts);
llvm::Error simplifyAttentionMasks(ir::Graph &g, const PassOptions &opts);
llvm::Error groupAttentionKV(ir::Graph &g, const PassOptions &opts);
llvm::Error fuseRMSNorm(ir::Graph &g, const PassOptions &opts);
llvm::Error fuseSwiGLU(ir::Graph &g, const PassOptions &opts);
llvm::Error fuseGelu(ir::Graph &g, const PassOptions &opts);
llvm::Error fuseRotary(ir::Graph &g, const PassOptions &opts);
llvm::Error foldHeadTransposes(ir::Graph &g, const PassOptions &opts);
llvm::Error verify(ir::Graph &g, const PassOptions &opts);
llvm::Error appendLoss(ir::Graph &g, const PassOptions &opts);
llvm::Error fuseLinearCrossEntropy(ir::Graph &g, const PassOptions &opts);
llvm::Error foldTransposeIntoGemm(ir::Graph &g, const PassOptions &opts);
llvm::Error fuseAddIntoGemm(ir::Graph &g, const PassOptions &opts);
// fuse-add-into-gemm's rewrite on the ops from index firstOp on, leaving the
// replaced ops dead (no compact: value ids and earlier op indices stay), as
// codegen runs it on a unit's gradient ops after autodiff. `roots`: values
// read after the graph beside its outputs (they are never fused away).
void fuseAddsIntoGemms(ir::Graph &g, size_t firstOp, const std::vector<ir::ValueId> &roots);
llvm::Error differentiateLoss(ir::Graph &g, const PassOptions &opts);
llvm::Error partitionUnits(ir::Graph &g, const PassOptions &opts);
llvm::Error chunkSequence(ir::Graph &g, const PassOptions &opts);
// After autodiff of a unit whose ops below numForwardOps are its forward:
// moves each chunk-sequence copy (megac.chunk) down to just before its first
// reader, so that the backward recomputes one chunk at a time, each right
// before its gradients.
void sinkChunkRecomputation(ir::Graph &g, size_t numForwardOps);

} // namespace megac::passes
