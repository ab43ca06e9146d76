// Gradient rules of the shape ops: data movement whose adjoint moves the
// gradient back (Reshape-likes, Transpose), sums it (Expand, Tile), cuts it
// (Concat), joins it (Split) or scatters it into zeros (Slice, Gather).
#include "passes/autodiff/Autodiff.h"

#include <algorithm>

namespace megac::autodiff {

using ir::kNoValue;

namespace {

// Reshape(dy, shape of input 0): the adjoint of every op that only
// reinterprets the shape (Reshape, Squeeze, Unsqueeze, Flatten).
void reshapeBackRule(GradContext &c) {
  const Shape in = c.shape(c.input(0));
  Attrs a;
  // A 0 in the target would mean "copy the dim" without allowzero.
  if (std::find(in.begin(), in.end(), 0) != in.end()) a.set("allowzero", Attr::ofInt(1));
  c.addGrad(0, c.op("Reshape", {c.gradOutput(0), c.int64s(in)}, a));
}

void transposeRule(GradContext &c) {
  size_t rank = c.shape(c.input(0)).size();
  std::vector<int64_t> perm = c.attrs().getInts("perm");
  if (perm.empty())
    for (size_t i = 0; i < rank; ++i) perm.push_back(int64_t(rank - 1 - i));
  if (perm.size() != rank) return c.unsupported("Transpose's perm does not match the input's rank");
  std::vector<int64_t> inverse(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t p = perm[i] < 0 ? perm[i] + int64_t(rank) : perm[i];
    if (p < 0 || p >= int64_t(rank)) return c.unsupported("Transpose's perm is not a permutation");
    inverse[size_t(p)] = int64_t(i);
  }
  Attrs a;
  a.set("perm", Attr::ofInts(inverse));
  c.addGrad(0, c.op("Transpose", {c.gradOutput(0)}, a));
}

void expandRule(GradContext &c) { c.addGrad(0, c.sumToShape(c.gradOutput(0), c.shape(c.input(0)))); }

int64_t normalized(int64_t axis, size_t rank) { return axis < 0 ? axis + int64_t(rank) : axis; }

// Each input gets its part of dy along the axis (one Split).
void concatRule(GradContext &c) {
  ValueId dy = c.gradOutput(0);
  size_t rank = c.shape(dy).size();
  int64_t axis = normalized(c.attrs().getInt("axis", 0), rank);
  if (axis < 0 || axis >= int64_t(rank)) return c.unsupported("Concat's axis is out of range");
  // Empty inputs take no part in the Split; their gradient is empty too.
  std::vector<size_t> parts;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < c.numInputs(); ++i) {
    const Shape s = c.shape(c.input(i));
    if (numElements(s) == 0) {
      if (c.needsGrad(i)) c.addGrad(i, c.graph().addConst("zeros", Tensor(c.dtype(c.input(i)), s)));
      continue;
    }
    parts.push_back(i);
    sizes.push_back(s[size_t(axis)]);
  }
  if (parts.empty()) return;
  if (parts.size() == 1) return c.addGrad(parts[0], dy);
  Attrs a;
  a.set("axis", Attr::ofInt(axis));
  std::vector<ValueId> pieces = c.opN("Split", {dy, c.int64s(sizes)}, parts.size(), a);
  for (size_t k = 0; k < pieces.size(); ++k)
    if (c.needsGrad(parts[k])) c.addGrad(parts[k], pieces[k]);
}

// Zeros of v's type, without a full-size constant: Expand(0, shape).
ValueId zerosLike(GradContext &c, ValueId v) {
  return c.op("Expand", {c.scalar(0, c.dtype(v)), c.int64s(c.shape(v))});
}

// The output gradients concatenated; outputs without one contribute zeros.
void splitRule(GradContext &c) {
  const Shape in = c.shape(c.input(0));
  int64_t axis = normalized(c.attrs().getInt("axis", 0), in.size());
  std::vector<ValueId> pieces;
  for (size_t k = 0; k < c.fwd().outputs.size(); ++k) {
    ValueId y = c.output(k);
    if (y == kNoValue) return c.unsupported("Split with an unused output slot cannot be differentiated");
    ValueId g = c.gradOutput(k);
    pieces.push_back(g != kNoValue ? g : zerosLike(c, y));
  }
  if (pieces.size() == 1) return c.addGrad(0, pieces[0]);
  Attrs a;
  a.set("axis", Attr::ofInt(axis));
  c.addGrad(0, c.op("Concat", pieces, a));
}

// dy written into zeros at the sliced positions (megac.SliceGrad takes the
// same starts/ends/axes/steps operands as the Slice).
void sliceRule(GradContext &c) {
  std::vector<ValueId> ins{c.gradOutput(0)};
  for (size_t i = 1; i < c.numInputs(); ++i) ins.push_back(c.input(i));
  Attrs a;
  a.set("shape", Attr::ofInts(c.shape(c.input(0))));
  c.addGrad(0, c.op("megac.SliceGrad", ins, a));
}

// Scatter-add of dy into zeros of the data's shape (embedding tables).
void gatherRule(GradContext &c) {
  const Shape data = c.shape(c.input(0));
  int64_t axis = normalized(c.attrs().getInt("axis", 0), data.size());
  if (axis < 0 || axis >= int64_t(data.size())) return c.unsupported("Gather's axis is out of range");
  Attrs a;
  a.set("axis", Attr::ofInt(axis));
  a.set("shape", Attr::ofInts(data));
  c.addGrad(0, c.op("megac.GatherGrad", {c.gradOutput(0), c.input(1)}, a));
}

// dy viewed as [r0, d0, r1, d1, ...] (only dims repeated more than once get
// their r), summed over the r's.
void tileRule(GradContext &c) {
  const Shape in = c.shape(c.input(0)), out = c.shape(c.output(0));
  if (in.size() != out.size()) return c.unsupported("Tile's output rank differs from its input's");
  Shape split;
  std::vector<int64_t> axes;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 0 || out[d] == in[d]) {
      split.push_back(out[d]);
      continue;
    }
    axes.push_back(int64_t(split.size()));
    split.push_back(out[d] / in[d]);
    split.push_back(in[d]);
  }
  ValueId dy = c.gradOutput(0);
  if (numElements(in) == 0) return c.addGrad(0, c.graph().addConst("zeros", Tensor(c.dtype(dy), in)));
  if (axes.empty()) return c.addGrad(0, dy);
  Attrs a;
  a.set("keepdims", Attr::ofInt(0));
  ValueId viewed = c.op("Reshape", {dy, c.int64s(split)});
  c.addGrad(0, c.op("ReduceSum", {viewed, c.int64s(axes)}, a));
}

} // namespace

void registerShapeGrads() {
  registerGradRule("Reshape", reshapeBackRule);
  registerGradRule("Squeeze", reshapeBackRule);
  registerGradRule("Unsqueeze", reshapeBackRule);
  registerGradRule("Flatten", reshapeBackRule);
  registerGradRule("Transpose", transposeRule);
  registerGradRule("Expand", expandRule);
  registerGradRule("Concat", concatRule);
  registerGradRule("Split", splitRule);
  registerGradRule("Slice", sliceRule);
  registerGradRule("Gather", gatherRule);
  registerGradRule("Tile", tileRule);
}

} // namespace megac::autodiff
