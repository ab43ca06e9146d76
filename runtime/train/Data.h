#pragma once
// Training data: a token stream read from a file, sampled as random
// contiguous windows of seq+1 tokens (inputs, and targets shifted by one).
// Sampling is stateless: window k of a run depends only on (seed, k), so a
// resumed run draws exactly what an uninterrupted one would.
//
// Formats: headerless uint16 (nanoGPT); llm.c's .bin (a 256 x int32 header,
// magic 20240520, version 1 = uint16 tokens, version 2 = uint32); headerless
// uint32 where the vocabulary exceeds 65536; or raw text as bytes (--text).
//
// A loss mask (--mask, for instruction tuning) is a file of one uint8 per
// token, no header: mask[i] != 0 when token i is a target the loss counts.
// A window's targets whose mask is 0 become the plan's ignore index, and a
// window with no counted target is skipped (drawn again, deterministically).
#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"

namespace megac::runtime {

class TokenData {
public:
  static llvm::Expected<TokenData> openTokens(const std::string &path, int64_t vocab);
  static llvm::Expected<TokenData> openText(const std::string &path, int64_t vocab);

  // Reads a mask file for these tokens (its length must equal the token count).
  llvm::Error attachMask(const std::string &path);
  bool hasMask() const { return !mask_.empty(); }

  int64_t size() const { return int64_t(tokens_.size()); }
  const std::string &path() const { return path_; }
  std::string describe() const; // "tokens.bin: 1,234,567 tokens (uint16)"

  // Fills tokens and targets, int64 [batch, seq], with the batch of windows
  // number `index` for `seed`. Errors if the data is shorter than one window.
  // With a mask, masked targets are `ignoreIndex` and windows without a
  // counted target are drawn again; `skipped` (if given) adds how many.
  llvm::Error batch(uint64_t seed, int64_t index, int64_t batchSize, int64_t seq, Tensor &tokens, Tensor &targets,
                    int64_t ignoreIndex = -100, int64_t *skipped = nullptr) const;

private:
  std::string path_, format_, maskPath_;
  std::vector<uint32_t> tokens_;
  std::vector<uint8_t> mask_; // empty: every target counts
};

} // namespace megac::runtime
