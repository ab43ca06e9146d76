#pragma once
// Which tensor of a weight source (a Hugging Face checkpoint, say) is which
// parameter of the graph, decided from the two lists of names and shapes
// alone, never from a list of model families:
// - a name matches exactly, or after removing a prefix that one side's names
//   carry (the `m.` of the exporter's wrapper module): the prefix is the one
//   under which the most names line up;
// - a tied embedding and head is one graph parameter; the checkpoint may name
//   it after either use (Hugging Face keeps `model.embed_tokens.weight` and
//   drops `lm_head.weight`), so a tied parameter without a name match takes the
//   one unused tensor of its shape;
// - matched tensors must have the parameter's shape.
#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace megac::runtime {

struct WantedTensor {
  std::string name;
  Shape shape;
  bool tiedEmbeddingHead = false; // read by the embedding Gather and the head's product
};

struct OfferedTensor {
  std::string name;
  Shape shape;
  std::string dtype; // for messages ("BF16")
};

struct NameMatch {
  std::vector<int32_t> source;     // per wanted tensor: its offered tensor, or -1
  int32_t matched = 0;
  std::string prefix;              // removed before comparing ("" for exact names)
  bool prefixOnGraph = true;       // which side's names carried it
  std::vector<std::string> notes;  // lines worth printing (prefix, ties, unused tensors)
  std::vector<int32_t> missing;    // wanted tensors left unmatched (with allowMissing)
};

struct NameMatchOptions {
  std::string graphLabel = "the graph";  // "the plan", "model.onnx"
  std::string sourceLabel;               // the weights' path
  bool allowMissing = false;             // --init-missing
};

// Fails with a listing of the unmatched names on both sides (the first 20
// of each) and hints (a prefix, a transpose, names the exporter generated)
// where a wanted tensor has no match and !allowMissing, where nothing matches
// at all, and where a match has another shape.
llvm::Expected<NameMatch> matchWeightNames(const std::vector<WantedTensor> &wanted,
                                           const std::vector<OfferedTensor> &offered, const NameMatchOptions &opts);

} // namespace megac::runtime
