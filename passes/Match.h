#pragma once
// Helpers of the fusion passes (fuse-rmsnorm, fuse-swiglu, fuse-gelu...):
// a read-only view of a graph's def-use chains for matching decomposed
// patterns from structure and folded constants (never from names).
#include "ir/Graph.h"

#include <optional>
#include <vector>

namespace megac::passes {

class Matcher {
public:
  explicit Matcher(ir::Graph &g);

  ir::Graph &graph() { return g_; }
  // The live op producing v (nullptr for inputs, initializers, kNoValue).
  const ir::Op *def(ir::ValueId v) const;
  // def(v) if it is an op of this type with n inputs and one output.
  const ir::Op *defOf(ir::ValueId v, const char *type, size_t numInputs) const;
  const ir::TensorType &type(ir::ValueId v) const { return g_.type(v); }
  const Shape &shape(ir::ValueId v) const { return g_.type(v).shape; }
  // The live ops reading v (op indices), and whether v is a graph output.
  const std::vector<int32_t> &users(ir::ValueId v) const { return users_[size_t(v)]; }
  bool isOutput(ir::ValueId v) const { return isOutput_[size_t(v)]; }
  // v feeds op `user` (in one or more operand slots) and nothing else, and
  // is no graph output: the fused op may drop it.
  bool onlyUsedBy(ir::ValueId v, const ir::Op *user) const;
  // Identity, or a Cast to the type it has already.
  bool isNoOp(const ir::Op &op) const;
  // v, back through such no-ops.
  ir::ValueId throughNoOps(ir::ValueId v) const;
  // x = Reshape(Expand(Unsqueeze(y, 2) as [B, kvH, 1, S, D]) to
  // [B, kvH, n, S, D]) as [B, kvH * n, S, D] (transformers' repeat_kv, the
  // grouped-query heads written out): y. Else x itself.
  ir::ValueId unrepeatedKV(ir::ValueId x) const;
  // A constant with one element (of any numeric dtype), as a double.
  std::optional<double> scalarConst(ir::ValueId v);
  // The other operand of the binary op `op` when one operand is v.
  static ir::ValueId otherOperand(const ir::Op &op, ir::ValueId v);

  // A product of single-use Mul ops (and Div by scalar constants) rooted at
  // v: the scalar constant factors multiplied into `scale`, the other leaves
  // in `leaves` with the op that takes each (users[i]; nullptr where the
  // leaf is the root v). The root itself may have other users.
  struct Product {
    double scale = 1;
    std::vector<ir::ValueId> leaves;
    std::vector<const ir::Op *> users;
  };
  Product product(ir::ValueId v, int maxDepth = 4);

private:
  void collect(ir::ValueId v, const ir::Op *user, int depth, Product &p);

  ir::Graph &g_;
  std::vector<std::vector<int32_t>> users_;
  std::vector<bool> isOutput_;
};

// Whether op has input i (optional inputs may be absent or kNoValue).
inline bool hasInput(const ir::Op &op, size_t i) { return i < op.inputs.size() && op.inputs[i] != ir::kNoValue; }

// |a - b| <= rel * |b|: for constants the exporters round to f32.
inline bool nearlyEqual(double a, double b, double rel = 1e-6) {
  double d = a - b;
  return (d < 0 ? -d : d) <= rel * (b < 0 ? -b : b);
}

// Replaces the op producing `result` by `fused` (whose outputs must include
// `result`); it keeps the op's name (for errors) when `fused` has none.
void replaceProducer(ir::Graph &g, ir::ValueId result, ir::Op fused);

// A new int64 constant holding shape s (a Reshape's target shape).
ir::ValueId shapeConst(ir::Graph &g, const std::string &nameHint, const Shape &s);

} // namespace megac::passes
