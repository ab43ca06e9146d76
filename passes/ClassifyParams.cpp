// classify-params: decide, from how each initializer is used and never from
// its name, whether it is a trainable parameter or a constant.
//
// A value is *dynamic* when it depends on the values (not just the shapes) of
// a run-time input. A floating-point initializer with more than one element
// is a parameter when it reaches an op that also takes dynamic data, passing
// only through ops that move or select elements (Transpose, Reshape, Gather
// with constant indices, Cast...). So weights, norm scales and biases are
// parameters; rotary inv_freq (which first goes through MatMul/Cos with
// constant positions), scalars and masks are constants.
// --trainable / --frozen regexes (matched against the whole name) override.
#include "passes/Pass.h"

#include "llvm/Support/Regex.h"

#include <cmath>
#include <set>

namespace megac::passes {

using namespace ir;

static const std::set<std::string> kLayoutOps = {
    "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Cast", "CastLike", "Identity", "Expand",
    "Gather",    "Slice",   "Split",   "Concat",    "Tile",    "GatherElements", "GatherND"};

// The first element that is NaN or +Inf, else the first -Inf, else -1.
static int64_t firstNonFinite(const Tensor &t, bool *onlyNegativeInf) {
  *onlyNegativeInf = true;
  int64_t negInf = -1;
  if (!isFloatType(t.dtype())) return -1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x = t.getAsDouble(i);
    if (std::isnan(x) || x == INFINITY) {
      *onlyNegativeInf = false;
      return i;
    }
    if (x == -INFINITY && negInf < 0) negInf = i;
  }
  return negInf;
}

llvm::Error classifyParams(Graph &g, const PassOptions &opts) {
  std::vector<bool> dynamic(g.values.size(), false);
  for (ValueId in : g.inputs) dynamic[size_t(in)] = true;
  for (const Op &op : g.ops) {
    if (op.dead || op.type == "Shape" || op.type == "Size") continue;
    bool d = false;
    for (ValueId in : op.inputs) d |= in != kNoValue && dynamic[size_t(in)];
    for (ValueId o : op.outputs)
      if (o != kNoValue) dynamic[size_t(o)] = d;
  }
  auto users = g.computeUsers();

  auto reachesDynamic = [&](ValueId start) {
    std::vector<ValueId> work{start};
    std::set<ValueId> seen{start};
    while (!work.empty()) {
      ValueId v = work.back();
      work.pop_back();
      for (int32_t u : users[size_t(v)]) {
        const Op &op = g.ops[size_t(u)];
        bool otherDynamic = false;
        for (ValueId in : op.inputs) otherDynamic |= in != kNoValue && in != v && dynamic[size_t(in)];
        if (otherDynamic) return true;
        if (!kLayoutOps.count(op.type)) continue;
        for (ValueId o : op.outputs)
          if (o != kNoValue && seen.insert(o).second) work.push_back(o);
      }
    }
    return false;
  };

  std::optional<llvm::Regex> trainable, frozen;
  std::string err;
  if (!opts.trainable.empty()) {
    trainable.emplace("^(" + opts.trainable + ")$");
    if (!trainable->isValid(err)) return graphError(g, "--trainable: bad regex: " + err);
  }
  if (!opts.frozen.empty()) {
    frozen.emplace("^(" + opts.frozen + ")$");
    if (!frozen->isValid(err)) return graphError(g, "--frozen: bad regex: " + err);
  }

  for (size_t i = 0; i < g.values.size(); ++i) {
    Value &v = g.values[i];
    if (!v.isInitializer()) continue;
    bool param = false;
    if (isFloatType(v.type.dtype) && numElements(v.type.shape) > 1 && reachesDynamic(ValueId(i))) {
      param = true;
      bool maskLike = true;
      int64_t bad = v.data ? firstNonFinite(*v.data, &maskLike) : -1;
      if (bad >= 0 && maskLike) param = false; // masks hold -inf
      else if (bad >= 0)
        return graphError(g, "initializer '" + v.name + "' is used as a weight but holds " +
                                 std::to_string(v.data->getAsDouble(bad)) + " at element " + llvm::Twine(bad) +
                                 ": the model file's weights are corrupt");
    }
    v.frozen = false;
    if (trainable && trainable->match(v.name)) {
      if (!isFloatType(v.type.dtype))
        return graphError(g, "--trainable matches '" + v.name + "', which is not floating point");
      param = true;
    }
    if (frozen && frozen->match(v.name) && param) {
      param = false;
      v.frozen = true;
    }
    v.kind = param ? ValueKind::Param : ValueKind::Const;
  }
  return llvm::Error::success();
}

} // namespace megac::passes
