// fold-transpose-into-gemm: rewrites a product with a transposed matrix,
//     y = MatMul(a, Transpose(w) {perm = [1, 0]})       a: [..., K], w: [N, K]
// into
//     y = Reshape(Gemm(Reshape(a, [M, K]), w) {transB = 1}, [..., N])
// (no Reshapes where a is 2-D). Exporters write nn.Linear this way when
// they cannot fold the transpose into the weight (big weights, shapes-only
// exports, optimize=False): the Transpose would copy the weight in every
// forward, its recomputation and the gradient, and its gradient is another
// Transpose. Gemm reads w as stored, and its gradient rule gives dw in the
// stored layout with no copy. The Reshapes are views (the memory plan shares
// their bytes). The Transpose stays only for other users.
#include "passes/Match.h"
#include "passes/Pass.h"

namespace megac::passes {

using namespace ir;

namespace {

struct TransposedProduct {
  int32_t product = -1; // the MatMul's op index
  ValueId a = kNoValue, w = kNoValue;
};

// w when v = Transpose(w) swaps the two dims of a 2-D w.
ValueId untransposed(const Matcher &mt, ValueId v) {
  const Op *t = mt.defOf(v, "Transpose", 1);
  if (!t || t->inputs[0] == kNoValue) return kNoValue;
  ValueId w = t->inputs[0];
  if (!mt.type(w).known() || mt.shape(w).size() != 2) return kNoValue;
  const std::vector<int64_t> perm = t->attrs.getInts("perm", {1, 0}); // default: dims reversed
  return perm == std::vector<int64_t>{1, 0} ? w : kNoValue;
}

std::optional<TransposedProduct> match(const Matcher &mt, const Graph &g, int32_t at) {
  const Op &mm = g.ops[size_t(at)];
  if (mm.inputs.size() != 2 || mm.outputs.size() != 1) return std::nullopt;
  TransposedProduct m;
  m.product = at;
  m.a = mm.inputs[0];
  if (m.a == kNoValue || mm.inputs[1] == kNoValue) return std::nullopt;
  m.w = untransposed(mt, mm.inputs[1]);
  if (m.w == kNoValue) return std::nullopt;
  const TensorType &aType = mt.type(m.a), &wt = mt.type(m.w), &yt = mt.type(mm.outputs[0]);
  if (!aType.known() || !yt.known() || aType.shape.size() < 2 || !isFloatType(aType.dtype) || wt.dtype != aType.dtype ||
      yt.dtype != aType.dtype)
    return std::nullopt;
  if (aType.shape.back() != wt.shape[1]) return std::nullopt; // K must agree (the verifier reports it otherwise)
  return m;
}

// The ops replacing the MatMul at m.product, in order.
std::vector<Op> rewrite(Graph &g, const TransposedProduct &m) {
  const Op &mm = g.ops[size_t(m.product)];
  const std::string base = mm.name.empty() ? g.value(mm.outputs[0]).name : mm.name;
  const ValueId y = mm.outputs[0];
  const Shape as = g.type(m.a).shape, ys = g.type(y).shape;
  const DType dt = g.type(m.a).dtype;
  const int64_t K = as.back(), N = g.type(m.w).shape[0], M = numElements(as) / K;

  std::vector<Op> ops;
  auto newValue = [&](const std::string &hint, Shape s) {
    Value v;
    v.name = hint;
    v.type = TensorType{dt, std::move(s), false};
    return g.addValueUnique(std::move(v));
  };
  Op gemm;
  gemm.type = "Gemm";
  gemm.name = base;
  gemm.attrs.set("transB", Attr::ofInt(1));
  gemm.inputs = {m.a, m.w};
  gemm.outputs = {y};
  if (as.size() == 2) return {gemm};

  Op rowsOfA;
  rowsOfA.type = "Reshape";
  rowsOfA.name = base + "/rows";
  rowsOfA.inputs = {m.a, shapeConst(g, base + "/rows_shape", {M, K})};
  rowsOfA.outputs = {newValue(g.value(m.a).name + "_rows", {M, K})};
  gemm.inputs[0] = rowsOfA.outputs[0];
  gemm.outputs = {newValue(g.value(y).name + "_rows", {M, N})};
  Op back;
  back.type = "Reshape";
  back.name = base + "/unrows";
  back.inputs = {gemm.outputs[0], shapeConst(g, base + "/unrows_shape", ys)};
  back.outputs = {y};
  return {rowsOfA, gemm, back};
}

} // namespace

llvm::Error foldTransposeIntoGemm(Graph &g, const PassOptions &) {
  std::vector<TransposedProduct> matches;
  {
    Matcher mt(g);
    for (size_t i = 0; i < g.ops.size(); ++i)
      if (!g.ops[i].dead && g.ops[i].type == "MatMul")
        if (auto m = match(mt, g, int32_t(i))) matches.push_back(*m);
  }
  if (matches.empty()) return llvm::Error::success();
  // Back to front, so that the indices of earlier matches stay valid.
  for (size_t i = matches.size(); i-- > 0;) {
    std::vector<Op> ops = rewrite(g, matches[i]);
    const size_t at = size_t(matches[i].product);
    for (size_t k = 0; k + 1 < ops.size(); ++k) g.insertOp(at + k, std::move(ops[k]));
    g.ops[at + ops.size() - 1] = std::move(ops.back());
  }
  g.recomputeProducers();
  markUnusedOpsDead(g, g.outputs); // Transposes now feeding nothing
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
