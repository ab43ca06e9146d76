#pragma once
// The causal-mask recognizer (issue 24): reads an attention mask that ops
// compute from small constants as a function of the query index i and the key
// index j, without evaluating any of its [rows, keys] entries, so that a
// compile at any sequence length takes time linear in it.
//
// Each value on the way is one of:
// - affine: a*i + b*j + c, the same in every batch and head (a constant,
//   a position range along the rows or along the keys: Range, arange,
//   cache_position, and sums and multiples of them);
// - a step function of the diagonal offset d = j - i: sorted breakpoints
//   and one value per piece (comparisons of affine values whose i and j
//   coefficients cancel, as j <= i does; Trilu; and every elementwise op of
//   such functions, each piece computed by the op's own CPU kernel on
//   scalars).
// Anything else (a mask that depends on the batch, on i or j alone over
// part of their range, on data) is not recognized: the caller evaluates it
// by blocks of rows as before.
#include "passes/AttentionMask.h"

namespace megac::passes {

// The facts of mask v (broadcast to [..., qSeq, kvSeq]) where the recognizer
// reads it; none otherwise.
std::optional<MaskFacts> symbolicMaskFacts(ir::Graph &g, ir::ValueId v, MaskKind kind, int64_t qSeq,
                                           int64_t kvSeq);

// The ops the recognizer reads beyond the elementwise ones that the block
// evaluation reads too.
bool symbolicMaskOp(const std::string &opType);

} // namespace megac::passes
