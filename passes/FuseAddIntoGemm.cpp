// fuse-add-into-gemm: a sum whose one operand is a product of matrices,
//     y = Add(x, view(P))       P = Gemm(a, b) or MatMul(a [..., K], b [K, N])
// (view: Reshapes, or none; either operand order), becomes the product with
// x as its C:
//     y = view(Gemm(a', b, x') {beta = 1})      a', x': a and x as [M, K], [M, N]
// where P and its views have no other reader and x, P and y have the same
// number of elements (no broadcasting). The residual adds of a transformer
// and the sums of gradient contributions (dX of q, k and v; of gate and up)
// are such sums: the GEMM's epilogue reads x instead of a separate kernel
// reading both operands and writing y. The Reshapes are views.
#include "passes/Match.h"
#include "passes/Pass.h"

namespace megac::passes {

using namespace ir;

namespace {

struct AddOfProduct {
  int32_t add = -1, product = -1;
  std::vector<int32_t> views; // the Reshapes from the product's output to the Add's operand
  ValueId x = kNoValue;       // the other operand
};

// The product P behind operand v: back through Reshapes that only v's chain
// reads, to a Gemm without C or a MatMul with a 2-D b and an a of rank >= 2.
std::optional<AddOfProduct> productBehind(const Matcher &mt, const Graph &g, ValueId v, size_t firstOp,
                                         const std::vector<bool> &isRoot) {
  AddOfProduct m;
  for (;;) {
    const Op *def = mt.def(v);
    if (!def || mt.isOutput(v) || isRoot[size_t(v)] || mt.users(v).size() != 1) return std::nullopt;
    const int32_t at = int32_t(def - g.ops.data());
    if (size_t(at) < firstOp) return std::nullopt;
    if (def->type == "Reshape" && def->outputs.size() == 1 && hasInput(*def, 0)) {
      m.views.push_back(at);
      v = def->inputs[0];
      continue;
    }
    if (def->outputs.size() != 1 || def->inputs.size() < 2 || !hasInput(*def, 0) || !hasInput(*def, 1))
      return std::nullopt;
    const Shape &as = mt.shape(def->inputs[0]), &bs = mt.shape(def->inputs[1]);
    if (def->type == "Gemm") {
      if (hasInput(*def, 2) || def->inputs.size() > 2) return std::nullopt;
    } else if (def->type != "MatMul" || as.size() < 2 || bs.size() != 2) {
      return std::nullopt;
    }
    m.product = at;
    return m;
  }
}

std::optional<AddOfProduct> match(const Matcher &mt, const Graph &g, int32_t at, size_t firstOp,
                                  const std::vector<bool> &isRoot) {
  const Op &add = g.ops[size_t(at)];
  if (add.inputs.size() != 2 || add.outputs.size() != 1 || !hasInput(add, 0) || !hasInput(add, 1))
    return std::nullopt;
  const TensorType &yt = mt.type(add.outputs[0]);
  if (!yt.known() || yt.dtype != DType::F32) return std::nullopt;
  for (size_t s : {size_t(1), size_t(0)}) { // the later operand first: autodiff adds new contributions there
    const ValueId t = add.inputs[s], x = add.inputs[1 - s];
    if (t == x || mt.type(t).shape != yt.shape || mt.type(x).shape != yt.shape || mt.type(x).dtype != DType::F32)
      continue;
    auto m = productBehind(mt, g, t, firstOp, isRoot);
    if (!m) continue;
    const Op &p = g.ops[size_t(m->product)];
    if (mt.type(p.outputs[0]).dtype != DType::F32 || numElements(mt.shape(p.outputs[0])) != numElements(yt.shape))
      continue;
    m->add = at;
    m->x = x;
    return m;
  }
  return std::nullopt;
}

// The ops replacing the Add, in order: Reshapes of a and x where needed, the
// Gemm, and a Reshape to y's shape where needed.
std::vector<Op> rewrite(Graph &g, const AddOfProduct &m) {
  const Op &add = g.ops[size_t(m.add)];
  const Op &p = g.ops[size_t(m.product)];
  const std::string base = p.name.empty() ? g.value(p.outputs[0]).name : p.name;
  const ValueId y = add.outputs[0];
  const Shape ys = g.type(y).shape, ps = g.type(p.outputs[0]).shape;
  std::vector<Op> ops;
  auto view = [&](ValueId from, const Shape &to, const std::string &suffix) {
    if (g.type(from).shape == to) return from;
    Value v;
    v.name = g.value(from).name + suffix;
    v.type = TensorType{g.type(from).dtype, to, false};
    Op r;
    r.type = "Reshape";
    r.name = base + "/" + suffix.substr(1);
    r.inputs = {from, shapeConst(g, r.name + "_shape", to)};
    r.outputs = {g.addValueUnique(std::move(v))};
    ops.push_back(r);
    return r.outputs[0];
  };
  Op gemm;
  gemm.type = "Gemm";
  gemm.name = base;
  gemm.attrs = p.attrs;
  ValueId a = p.inputs[0];
  Shape rows = ps;
  if (p.type == "MatMul") { // a [..., K] x b [K, N] as a [M, K] x b
    const Shape as = g.type(a).shape;
    const int64_t K = as.back(), N = g.type(p.inputs[1]).shape[1];
    rows = {numElements(as) / K, N};
    a = view(a, {rows[0], K}, "_rows");
  }
  gemm.attrs.set("beta", Attr::ofFloat(1.0f));
  gemm.inputs = {a, p.inputs[1], view(m.x, rows, "_addend")};
  if (rows == ys) {
    gemm.outputs = {y};
    ops.push_back(gemm);
    return ops;
  }
  Value sum;
  sum.name = g.value(y).name + "_rows";
  sum.type = TensorType{g.type(y).dtype, rows, false};
  gemm.outputs = {g.addValueUnique(std::move(sum))};
  ops.push_back(gemm);
  Op back;
  back.type = "Reshape";
  back.name = base + "/unrows";
  back.inputs = {gemm.outputs[0], shapeConst(g, back.name + "_shape", ys)};
  back.outputs = {y};
  ops.push_back(back);
  return ops;
}

} // namespace

void fuseAddsIntoGemms(Graph &g, size_t firstOp, const std::vector<ValueId> &roots) {
  std::vector<AddOfProduct> matches;
  {
    Matcher mt(g);
    std::vector<bool> isRoot(g.values.size(), false);
    for (ValueId r : roots)
      if (r != kNoValue) isRoot[size_t(r)] = true;
    for (size_t i = firstOp; i < g.ops.size(); ++i)
      if (!g.ops[i].dead && g.ops[i].type == "Add")
        if (auto m = match(mt, g, int32_t(i), firstOp, isRoot)) matches.push_back(*m);
  }
  // Back to front: a rewrite inserts ops at its Add, so the indices of
  // earlier Adds and of every product (which precedes its Add) stay valid.
  for (size_t i = matches.size(); i-- > 0;) {
    const AddOfProduct &m = matches[i];
    std::vector<Op> ops = rewrite(g, m);
    g.ops[size_t(m.product)].dead = true;
    for (int32_t v : m.views) g.ops[size_t(v)].dead = true;
    const size_t at = size_t(m.add);
    for (size_t k = 0; k + 1 < ops.size(); ++k) g.insertOp(at + k, std::move(ops[k]));
    g.ops[at + ops.size() - 1] = std::move(ops.back());
  }
  if (!matches.empty()) g.recomputeProducers();
}

llvm::Error fuseAddIntoGemm(Graph &g, const PassOptions &) {
  fuseAddsIntoGemms(g, 0, {});
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
