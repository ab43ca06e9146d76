#pragma once
// What the shape family exposes beyond its schemas: how a SplitToSequence
// cuts its input, shared by SequenceAt's inference and lower-sequences.
#include "ir/Graph.h"

namespace megac::ir {

struct SequenceSplit {
  DType dtype = DType::Undefined;
  Shape inputShape;
  int64_t axis = 0;           // normalized
  std::vector<int64_t> sizes; // one per sequence element, along axis
  bool squeeze = false;       // elements drop the axis (no split, keepdims=0)

  // The shape of element k.
  Shape elementShape(size_t k) const;
};

// Describes SplitToSequence op `op`: its input must be typed and its split
// (if given) a constant. Errors name the node.
llvm::Expected<SequenceSplit> describeSplitToSequence(Graph &g, const Op &op);

} // namespace megac::ir
