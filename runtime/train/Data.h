#pragma once
// Training data: a token stream read from a file, sampled as random
// contiguous windows of seq+1 tokens (inputs, and targets shifted by one).
// Sampling is stateless: window k of a run depends only on (seed, k), so a
// resumed run draws exactly what an uninterrupted one would.
//
// Formats: headerless uint16 (nanoGPT); llm.c's .bin (a 256 x int32 header,
// magic 20240520, version 1 = uint16 tokens, version 2 = uint32); headerless
// uint32 where the vocabulary exceeds 65536; or raw text as bytes (--text).
#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"

namespace megac::runtime {

class TokenData {
public:
  static llvm::Expected<TokenData> openTokens(const std::string &path, int64_t vocab);
  static llvm::Expected<TokenData> openText(const std::string &path, int64_t vocab);

  int64_t size() const { return int64_t(tokens_.size()); }
  const std::string &path() const { return path_; }
  std::string describe() const; // "tokens.bin: 1,234,567 tokens (uint16)"

  // Fills tokens and targets, int64 [batch, seq], with the batch of windows
  // number `index` for `seed`. Errors if the data is shorter than one window.
  llvm::Error batch(uint64_t seed, int64_t index, int64_t batchSize, int64_t seq, Tensor &tokens, Tensor &targets) const;

private:
  std::string path_, format_;
  std::vector<uint32_t> tokens_;
};

} // namespace megac::runtime
