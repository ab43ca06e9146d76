#pragma once
// The IR's textual form. It parses back (ir/Parser.h) to an equal graph.
//
//   graph @main opset 20 {
//     %input_ids = input i64[2,16]
//     %w = param f32[256,64] external("model.onnx.data", 0, 65536)
//     %two = const f32[] dense<2>
//     %emb = Gather(%w, %input_ids) {axis = 0} : f32[2,16,64] loc("node_Gather_4")
//     return %logits
//   }
#include "ir/Graph.h"

#include "llvm/Support/raw_ostream.h"

namespace megac::ir {

struct PrintOptions {
  // Constants with more elements than this print as `dense<...>`
  // (readable dumps; such text does not parse back). -1: print all.
  int64_t elideAbove = -1;
  // Tensors with more elements than this print as hex bytes.
  int64_t decimalUpTo = 16;
};

void printGraph(const Graph &g, llvm::raw_ostream &os, const PrintOptions &opts = {});
std::string graphToString(const Graph &g, const PrintOptions &opts = {});
// A name as it appears after '%': bare when it is [A-Za-z0-9_.:/-]+, else quoted.
std::string printableName(llvm::StringRef name);
void printTensorLiteral(const Tensor &t, llvm::raw_ostream &os, const PrintOptions &opts);
void printAttr(const Attr &a, llvm::raw_ostream &os, const PrintOptions &opts);

} // namespace megac::ir
