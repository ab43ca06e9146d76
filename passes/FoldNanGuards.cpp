// fold-nan-guards: the torch sdpa export guards each attention softmax
// against fully-masked rows:
//     s = Softmax(scores + mask);  out = Where(IsNaN(s), zero, s)
// A softmax row is NaN only when its maximum is +-inf or an entry is NaN.
// If mask is a compile-time constant in which every softmax row has an
// entry of modest magnitude (adding it to a finite score stays finite) and
// no entry that could make a finite score +inf or NaN, every row's maximum
// is finite for finite scores: the guard never fires, and `out` is `s`.
// (With non-finite scores the model has already diverged; the guard would
// only hide it.) Whenever that cannot be proven, the guard stays.
#include "ir/Eval.h"
#include "passes/Pass.h"

#include <cmath>
#include <map>
#include <tuple>

namespace megac::passes {

using namespace ir;

namespace {

// Adding a value below this magnitude to any finite number of the dtype
// cannot round to infinity (half an ulp of the largest finite value).
double overflowFreeBound(DType t) {
  switch (t) {
  case DType::F64: return std::ldexp(1.0, 970);
  case DType::F16: return std::ldexp(1.0, 4);
  case DType::BF16: return std::ldexp(1.0, 119);
  default: return std::ldexp(1.0, 103); // f32
  }
}

int32_t producerOf(const Graph &g, ValueId v, llvm::StringRef type) {
  if (v == kNoValue) return -1;
  int32_t p = g.value(v).producer;
  if (p < 0 || g.ops[size_t(p)].dead || g.ops[size_t(p)].type != type) return -1;
  return p;
}

// The value of v if it is known at compile time: a constant, or the result
// of an op whose inputs are all constants (evaluated here).
std::optional<Tensor> constantValue(Graph &g, ValueId v, const PassOptions &opts) {
  if (const Tensor *t = g.constValue(v)) return *t;
  const Value &val = g.value(v);
  // A constant broadcast by Expand (a mask specialize could not fold whole):
  // the caller broadcasts it the same way.
  if (val.kind == ValueKind::Result && val.producer >= 0) {
    const Op &e = g.ops[size_t(val.producer)];
    if (e.type == "Expand" && !e.inputs.empty())
      if (const Tensor *t = g.constValue(e.inputs[0])) return *t;
  }
  if (val.kind != ValueKind::Result || val.producer < 0 || !val.type.known() || val.type.isSequence)
    return std::nullopt;
  if (numElements(val.type.shape) > opts.foldLimit) return std::nullopt;
  const Op &op = g.ops[size_t(val.producer)];
  std::vector<Tensor> held;
  held.reserve(op.inputs.size());
  std::vector<const Tensor *> ins;
  for (ValueId in : op.inputs) {
    if (in == kNoValue) {
      ins.push_back(nullptr);
      continue;
    }
    const Tensor *t = g.constValue(in);
    if (!t) return std::nullopt;
    held.push_back(*t);
    ins.push_back(&held.back());
  }
  auto outs = evalOp(g, val.producer, ins);
  if (!outs) {
    llvm::consumeError(outs.takeError());
    return std::nullopt;
  }
  for (size_t k = 0; k < op.outputs.size(); ++k)
    if (op.outputs[k] == v) return (*outs)[k];
  return std::nullopt;
}

// True if every row of `mask` along `axis`, once broadcast to `target` (the
// softmax input's shape), keeps the softmax finite for finite scores.
bool maskKeepsRowsFinite(const Tensor &mask, const Shape &target, int64_t axis, DType scoreType) {
  const size_t rank = target.size();
  if (mask.rank() > int64_t(rank) || !isFloatType(mask.dtype())) return false;
  Shape m(rank - size_t(mask.rank()), 1);
  m.insert(m.end(), mask.shape().begin(), mask.shape().end());
  if (target[size_t(axis)] == 0 || numElements(m) == 0) return false;
  const double bound = overflowFreeBound(scoreType);
  std::vector<int64_t> strides = rowMajorStrides(m);
  const int64_t rowLen = m[size_t(axis)], rowStride = strides[size_t(axis)];
  const int64_t rows = numElements(m) / rowLen;
  for (int64_t r = 0; r < rows; ++r) {
    // Offset of row r's first element: r enumerates the other dims in order.
    int64_t rest = r, offset = 0;
    for (size_t d = rank; d-- > 0;) {
      if (int64_t(d) == axis) continue;
      offset += (rest % m[d]) * strides[d];
      rest /= m[d];
    }
    bool anyModest = false;
    for (int64_t j = 0; j < rowLen; ++j) {
      double v = mask.getAsDouble(offset + j * rowStride);
      if (std::isnan(v) || v >= bound) return false; // could make a score +inf or NaN
      anyModest |= std::fabs(v) < bound;
    }
    if (!anyModest) return false;
  }
  return true;
}

// maskKeepsRowsFinite's answers by (mask value, target shape, axis, score
// type): every layer's softmax reads the same mask, and at 8,192 tokens a
// scan is 64M entries.
using MaskAnswers = std::map<std::tuple<ValueId, Shape, int64_t, DType>, bool>;

// Is Softmax op `sm` fed by scores + (constant mask) that keeps every row finite?
bool softmaxCannotBeNaN(Graph &g, const Op &sm, const PassOptions &opts, MaskAnswers &answers) {
  ValueId x = sm.inputs.empty() ? kNoValue : sm.inputs[0];
  int32_t addIdx = producerOf(g, x, "Add");
  if (addIdx < 0) return false;
  const TensorType &xt = g.type(x);
  if (!xt.known() || xt.shape.empty()) return false;
  int64_t rank = int64_t(xt.shape.size());
  int64_t axis = sm.attrs.getInt("axis", -1);
  if (axis < -rank || axis >= rank) return false;
  if (axis < 0) axis += rank;
  const Op &add = g.ops[size_t(addIdx)];
  for (ValueId operand : add.inputs) {
    if (operand == kNoValue) continue;
    const auto key = std::make_tuple(operand, xt.shape, axis, xt.dtype);
    auto known = answers.find(key);
    if (known == answers.end()) {
      std::optional<Tensor> mask = constantValue(g, operand, opts);
      known = answers.emplace(key, mask && maskKeepsRowsFinite(*mask, xt.shape, axis, xt.dtype)).first;
    }
    if (known->second) return true;
  }
  return false;
}

bool isGraphOutput(const Graph &g, ValueId v) {
  for (ValueId o : g.outputs)
    if (o == v) return true;
  return false;
}

} // namespace

llvm::Error foldNanGuards(Graph &g, const PassOptions &opts) {
  bool changed = false;
  MaskAnswers answers;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    Op &where = g.ops[i];
    if (where.dead || where.type != "Where" || where.inputs.size() != 3 || where.outputs.size() != 1) continue;
    // Where(IsNaN(s), _, s)
    int32_t isNanIdx = producerOf(g, where.inputs[0], "IsNaN");
    if (isNanIdx < 0) continue;
    ValueId s = g.ops[size_t(isNanIdx)].inputs[0];
    if (where.inputs[2] != s) continue;
    int32_t smIdx = producerOf(g, s, "Softmax");
    if (smIdx < 0) continue;
    ValueId out = where.outputs[0];
    if (g.type(out) != g.type(s) || isGraphOutput(g, out)) continue;
    if (!softmaxCannotBeNaN(g, g.ops[size_t(smIdx)], opts, answers)) continue;
    g.replaceAllUses(out, s);
    g.ops[i].dead = true;
    changed = true;
  }
  if (!changed) return llvm::Error::success();
  // IsNaN ops left without users.
  auto users = g.computeUsers();
  for (Op &op : g.ops) {
    if (op.dead || op.type != "IsNaN") continue;
    bool used = isGraphOutput(g, op.outputs[0]);
    for (int32_t u : users[size_t(op.outputs[0])]) used |= !g.ops[size_t(u)].dead;
    if (!used) op.dead = true;
  }
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
