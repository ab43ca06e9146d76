#include "passes/Pass.h"

namespace megac::passes {

const std::vector<PassInfo> &allPasses() {
  static const std::vector<PassInfo> passes = {
      {"classify-params", "decide which initializers are trainable parameters and which are constants", classifyParams},
      {"specialize", "infer every static shape and fold what depends only on shapes and constants", specialize},
      {"lower-sequences", "replace SplitToSequence/SequenceAt pairs by Split outputs", lowerSequences},
      {"fold-nan-guards", "drop Where(IsNaN(softmax), 0, softmax) guards that cannot fire", foldNanGuards},
      {"dce", "remove ops whose results are never used", eliminateDeadCode},
      {"fuse-attention", "rewrite softmax(scale * Q K^T + mask) V written as separate ops into Attention",
       fuseAttention},
      {"simplify-attention-masks",
       "give Attention is_causal = 1 for a compile-time causal attn_mask and drop one that masks nothing",
       simplifyAttentionMasks},
      {"group-attention-kv", "read K and V written out by repeat_kv as Attention's grouped kv heads (GQA)",
       groupAttentionKV},
      {"fuse-rmsnorm", "rewrite x / sqrt(mean(x^2) + eps) * w written as separate ops into RMSNormalization",
       fuseRMSNorm},
      {"fuse-swiglu", "rewrite g * sigmoid(g) * u written as separate ops into megac.SwiGLU", fuseSwiGLU},
      {"fuse-gelu", "rewrite the tanh and erf GELU written as separate ops into Gelu", fuseGelu},
      {"fuse-rotary", "rewrite the rotate-half rotary embedding written as separate ops into RotaryEmbedding",
       fuseRotary},
      {"fold-head-transposes",
       "give Attention (and the rotaries feeding it) the 3-D [B, S, heads * D] form where transposes split and merge its heads",
       foldHeadTransposes},
      {"verify", "check the IR's invariants", verify},
      {"append-loss", "append the mean token cross-entropy against a new `targets` input", appendLoss},
      {"fuse-linear-cross-entropy",
       "fuse the head's MatMul/Gemm into the loss (megac.LinearCrossEntropy: logits a chunk of rows at a time)",
       fuseLinearCrossEntropy},
      {"fold-transpose-into-gemm", "rewrite MatMul(A, Transpose(W)) with a 2-D W into Gemm(A, W) {transB = 1}",
       foldTransposeIntoGemm},
      {"fuse-add-into-gemm", "give a product whose result is added to x (and read by nothing else) x as its C: Gemm {beta = 1}",
       fuseAddIntoGemm},
      {"partition-units", "split the model into stream units (embedding, each layer, head) by structure",
       partitionUnits},
      {"chunk-sequence", "run each unit's MLP block over PassOptions::sequenceChunks slices of the sequence",
       chunkSequence},
      {"autodiff", "append d(loss)/d(parameter) for every parameter as graph outputs", differentiateLoss},
  };
  return passes;
}

const PassInfo *lookupPass(llvm::StringRef name) {
  for (const PassInfo &p : allPasses())
    if (name == p.name) return &p;
  return nullptr;
}

llvm::Error runPass(ir::Graph &g, llvm::StringRef name, const PassOptions &opts) {
  const PassInfo *p = lookupPass(name);
  if (!p) return llvm::createStringError(llvm::inconvertibleErrorCode(), "unknown pass '" + name.str() + "'");
  return p->run(g, opts);
}

const std::vector<std::string> &importPipeline() {
  static const std::vector<std::string> p = {
      "classify-params", "specialize",           "lower-sequences", "specialize",  "fold-nan-guards",
      "dce",             "fuse-attention",       "simplify-attention-masks",        "group-attention-kv",
      "fuse-rmsnorm",    "fuse-swiglu",          "fuse-gelu",       "fuse-rotary", "fold-head-transposes",
      "dce",             "verify"};
  return p;
}

std::vector<std::string> lossPipeline(const PassOptions &opts) {
  std::vector<std::string> p = {"append-loss"};
  if (opts.fuseLinearCrossEntropy) p.push_back("fuse-linear-cross-entropy"); // before the head's product is a Gemm
  p.push_back("fold-transpose-into-gemm");
  p.push_back("fuse-add-into-gemm"); // the residual adds; codegen fuses the gradients' sums after autodiff
  return p;
}

llvm::Error runPipeline(ir::Graph &g, const std::vector<std::string> &names, const PassOptions &opts) {
  for (const std::string &n : names)
    if (auto e = runPass(g, n, opts)) return e;
  return llvm::Error::success();
}

} // namespace megac::passes
