#pragma once
// Attention masks known at compile time, as the passes that fuse or simplify
// attention read them: a constant, a constant broadcast by Expand, or a mask
// too large to fold (past PassOptions::foldLimit: a causal mask at seq 32768
// has 2^30 entries) that elementwise ops and Expands compute from small
// constants. The last is evaluated here a block of query rows at a time and
// never held whole.
#include "ir/Graph.h"
#include "passes/Pass.h"

#include <map>
#include <optional>
#include <string>
#include <tuple>

namespace megac::passes {

// A masked entry of an additive mask: adding it to a score of ordinary size
// makes exp() underflow to exactly 0, as -inf does.
inline constexpr double kMaskedBound = -1e30;

// How the entries of a mask read.
struct MaskKind {
  bool boolean;          // true: a bool mask; false: additive
  bool inverted = false; // a bool mask whose true entries are the masked ones
  bool visible(double x) const { return boolean ? (x != 0) != inverted : x == 0; }
  bool masked(double x) const { return boolean ? (x == 0) != inverted : x <= kMaskedBound; }
  bool fullyMasked(double x) const { return boolean ? masked(x) : x == -INFINITY; }
};

// A mask viewed through broadcasting to [B, H, rows, keys]: a whole mask
// (whose row dim may be 1: one row serving every query), or the block of
// query rows [rowBegin, rowBegin + rows) of a mask evaluated by blocks.
class MaskView {
public:
  explicit MaskView(const Tensor &t) : MaskView(t, 0) { wholeRowBroadcast_ = m4_[2] == 1; }
  static MaskView block(const Tensor &t, int64_t rowBegin) { return MaskView(t, rowBegin); }
  const Shape &shape4() const { return m4_; }
  int64_t rowBegin() const { return rowBegin_; }
  bool oneRowForAll() const { return wholeRowBroadcast_; }
  const Tensor &tensor() const { return t_; }
  int64_t offset(int64_t b, int64_t h, int64_t i) const { return b * strides_[0] + h * strides_[1] + i * strides_[2]; }
  int64_t keyStride() const { return strides_[3]; }
  double at(int64_t b, int64_t h, int64_t i, int64_t j) const { return t_.getAsDouble(offset(b, h, i) + j * strides_[3]); }

private:
  MaskView(const Tensor &t, int64_t rowBegin);
  const Tensor &t_;
  Shape m4_;
  std::vector<int64_t> strides_;
  int64_t rowBegin_;
  bool wholeRowBroadcast_ = false;
};

// What a mask does to scores of qSeq queries and kvSeq keys.
struct MaskFacts {
  bool causal = true;          // key j is visible to query i exactly when j <= i
  bool allVisible = true;      // nothing is masked
  bool fullyMaskedRow = false; // some query sees no key
};

// Adds the rows a view covers to `facts` (start from MaskFacts{}).
void scanMask(const MaskView &m, MaskKind kind, int64_t qSeq, int64_t kvSeq, MaskFacts &facts);

// The facts of mask value v, where it is known at compile time: a constant
// (through an Expand), or a mask over the fold limit that ops compute from
// constants: read from its ops by the recognizer (passes/SymbolicMask.h),
// which evaluates none of its entries, or, where it does not recognize them,
// evaluated a block of rows at a time through elementwise ops and Expands
// (each constant at most the fold limit), with a note on stderr. v
// broadcasts to [..., qSeq, kvSeq]. None otherwise.
std::optional<MaskFacts> compileTimeMaskFacts(ir::Graph &g, ir::ValueId v, MaskKind kind, int64_t qSeq,
                                              int64_t kvSeq, const PassOptions &opts);

// The elementwise ops (and Expand, Identity) that the mask readers read
// through: an op on the whole mask that is the same op on each entry.
bool elementwiseMaskOp(const std::string &opType);

// What the mask readers did in this process, for `megac compile --stats`:
// masks the recognizer read from their ops (passes/SymbolicMask.h), and
// masks evaluated a block of rows at a time with the entries evaluated.
struct MaskReadingStats {
  int64_t recognized = 0, evaluated = 0, entriesEvaluated = 0;
};
MaskReadingStats &maskReadingStats();

// The block-of-rows evaluation alone (what compileTimeMaskFacts does where
// the recognizer does not read the mask, saying so on stderr with `note`;
// the recognizer's tests compare against it).
std::optional<MaskFacts> evaluatedMaskFacts(ir::Graph &g, ir::ValueId v, MaskKind kind, int64_t qSeq, int64_t kvSeq,
                                            const PassOptions &opts, bool note = false);

// compileTimeMaskFacts, remembered per mask and reading. Masks that compute
// the same share one entry (exports build one mask per layer, each with its
// own ops), so a model's mask is read once.
class MaskFactsCache {
public:
  std::optional<MaskFacts> get(ir::Graph &g, ir::ValueId v, MaskKind kind, int64_t qSeq, int64_t kvSeq,
                               const PassOptions &opts);

private:
  // Equal for values that compute the same: constants by their data, ops by
  // type, inputs and attributes; empty where v is not known at compile time.
  std::string structure(ir::Graph &g, ir::ValueId v, int &opsLeft);

  std::map<ir::ValueId, std::string> structures_;
  std::map<std::tuple<std::string, bool, bool, int64_t, int64_t>, std::optional<MaskFacts>> known_;
};

} // namespace megac::passes
