#pragma once
// Tied embedding and head: one parameter read both by the embedding lookup
// (a Gather's data) and by the head's matrix product (MatMul, Gemm, or the
// fused megac.LinearCrossEntropy's weight), directly or through views. A
// Hugging Face checkpoint names such a tensor after one of its two uses.
#include "ir/Graph.h"

#include <set>

namespace megac::ir {

std::set<ValueId> tiedEmbeddingHeads(const Graph &g);

} // namespace megac::ir
