// specialize: with every dimension static, infer each op's output types in
// order and evaluate, at compile time, every op whose inputs are all
// constants (shape arithmetic, masks, rotary tables...). What remains is the
// real compute.
#include "ir/Eval.h"
#include "ir/OpSchema.h"
#include "passes/Pass.h"
#include "runtime/core/CheckedSize.h"
#include "runtime/core/Hash.h"
#include "runtime/cpu/Kernel.h"

#include <cstring>
#include <set>
#include <unordered_map>

namespace megac::passes {

using namespace ir;

static bool allOutputsConst(const Graph &g, const Op &op) {
  for (ValueId o : op.outputs)
    if (o != kNoValue && !(g.value(o).kind == ValueKind::Const && g.value(o).data)) return false;
  return true;
}

static bool canFold(Graph &g, const Op &op, const OpSchema &schema, const PassOptions &opts) {
  if (!schema.foldable) return false;
  int64_t outElems = 0;
  for (ValueId o : op.outputs) {
    if (o == kNoValue) continue;
    const TensorType &t = g.type(o);
    if (!t.known() || t.isSequence) return false;
    auto n = checkedNumel(t.shape, opts.foldLimit); // shapes inferred from a file: checked
    if (!n) return false;
    outElems += *n;
  }
  if (outElems > opts.foldLimit) return false;
  for (ValueId in : op.inputs) {
    if (in == kNoValue) continue;
    const Value &v = g.value(in);
    if (v.kind != ValueKind::Const || !v.hasData() || v.type.isSequence) return false;
  }
  return true;
}

// Folds of one op on equal constants share one result: an export that
// rebuilds the causal mask in every layer then holds one [batch, 1, seq, seq]
// mask, not one per layer (405B at seq 4096: 126 x 64 MiB per sequence).
class FoldMemo {
public:
  // The results of an earlier fold of `type` with `attrs` on inputs equal to
  // `inputs` (with outputs where `outputs` has them), or nullptr.
  const std::vector<ValueId> *find(const Graph &g, const std::string &type, const Attrs &attrs,
                                   const std::vector<ValueId> &inputs, const std::vector<ValueId> &outputs) const {
    auto it = byKey_.find(key(g, type, inputs));
    if (it == byKey_.end()) return nullptr;
    for (const Entry &e : it->second)
      if (e.type == type && e.attrs == attrs && sameInputs(g, e.inputs, inputs) && samePresence(e.results, outputs))
        return &e.results;
    return nullptr;
  }
  void add(const Graph &g, const std::string &type, const Attrs &attrs, const std::vector<ValueId> &inputs,
           const std::vector<ValueId> &results) {
    byKey_[key(g, type, inputs)].push_back({type, attrs, inputs, results});
  }

private:
  struct Entry {
    std::string type;
    Attrs attrs;
    std::vector<ValueId> inputs, results;
  };
  // Type, input types and a sample of each input's bytes (equality is then checked in full).
  static uint64_t key(const Graph &g, const std::string &type, const std::vector<ValueId> &inputs) {
    uint64_t h = fnv1a(kFnvOffset, type.data(), type.size());
    for (ValueId in : inputs) {
      if (in == kNoValue) {
        h = fnv1a(h, "-", 1);
        continue;
      }
      const Value &v = g.value(in);
      std::string t = v.type.str();
      h = fnv1a(h, t.data(), t.size());
      if (!v.data) continue;
      const size_t n = v.data->nbytes(), head = std::min<size_t>(n, 256);
      h = fnv1a(h, v.data->raw(), head);
      h = fnv1a(h, static_cast<const uint8_t *>(v.data->raw()) + (n - head), head);
    }
    return h;
  }
  static bool sameInputs(const Graph &g, const std::vector<ValueId> &a, const std::vector<ValueId> &b) {
    if (a.size() != b.size()) return false;
    for (size_t k = 0; k < a.size(); ++k) {
      if (a[k] == b[k]) continue;
      if (a[k] == kNoValue || b[k] == kNoValue) return false;
      const Value &x = g.value(a[k]), &y = g.value(b[k]);
      if (x.type != y.type || !x.data || !y.data || std::memcmp(x.data->raw(), y.data->raw(), x.data->nbytes()) != 0)
        return false;
    }
    return true;
  }
  static bool samePresence(const std::vector<ValueId> &a, const std::vector<ValueId> &b) {
    if (a.size() != b.size()) return false;
    for (size_t k = 0; k < a.size(); ++k)
      if ((a[k] == kNoValue) != (b[k] == kNoValue)) return false;
    return true;
  }
  std::unordered_map<uint64_t, std::vector<Entry>> byKey_;
};

// Values too large to fold that are a small constant broadcast: the output
// of Expand(constant, shape) or of a ConstantOfShape (rewritten to such an
// Expand). An elementwise op on such values and constants is computed on the
// small constants and becomes one Expand of the result, so a causal mask of
// [batch, 1, seq, seq] folds as [1, 1, seq, seq] and the passes after
// (fold-nan-guards, fuse-attention) see a broadcast constant, whatever the
// batch.
class BroadcastFolder {
public:
  explicit BroadcastFolder(FoldMemo &memo) : memo_(memo) {}

  // Registers or rewrites op i when its output is over the fold limit. Any
  // error is the op's own (as folding it would have given).
  llvm::Error visit(Graph &g, int32_t i, const PassOptions &opts) {
    const Op &op = g.ops[size_t(i)];
    if (op.outputs.size() != 1 || op.outputs[0] == kNoValue) return llvm::Error::success();
    const ValueId out = op.outputs[0];
    if (!g.type(out).known() || numElements(g.type(out).shape) <= opts.foldLimit) return llvm::Error::success();
    if (op.type == "Expand" && op.inputs.size() == 2) {
      auto it = small_.find(op.inputs[0]);
      if (it != small_.end()) small_[out] = it->second;
      else if (isSmallConst(g, op.inputs[0], opts)) small_[out] = op.inputs[0];
      return llvm::Error::success();
    }
    if (op.type == "ConstantOfShape") return constantOfShape(g, i);
    if (!kElementwise.count(op.type)) return llvm::Error::success();
    std::vector<ValueId> smalls;
    for (ValueId in : op.inputs) {
      if (in == kNoValue) return llvm::Error::success();
      auto it = small_.find(in);
      ValueId s = it != small_.end() ? it->second : in;
      if (!isSmallConst(g, s, opts)) return llvm::Error::success();
      smalls.push_back(shrunk(g, s));
    }
    std::vector<const Tensor *> ins;
    Shape r;
    for (ValueId s : smalls) {
      ins.push_back(g.constValue(s));
      if (!broadcastInto(r, g.type(s).shape)) return llvm::Error::success();
    }
    if (numElements(r) > opts.foldLimit) return llvm::Error::success();
    if (const std::vector<ValueId> *earlier = memo_.find(g, op.type, op.attrs, smalls, op.outputs)) {
      becomeExpand(g, i, (*earlier)[0]);
      return llvm::Error::success();
    }
    Tensor result(g.type(out).dtype, r);
    cpu::KernelContext ctx{op.attrs, ins, {&result}};
    if (auto e = cpu::runKernel(op.type, ctx)) return opError(g, op, llvm::toString(std::move(e)));
    ValueId small = g.addConst(g.value(out).name + ".small", std::move(result));
    memo_.add(g, g.ops[size_t(i)].type, g.ops[size_t(i)].attrs, smalls, {small});
    becomeExpand(g, i, small);
    return llvm::Error::success();
  }

private:
  // v with every dim along which all its slices are equal cut to size 1 (an
  // index table repeated over the batch); v itself when there is none.
  static ValueId shrunk(Graph &g, ValueId v) {
    Tensor t = *g.constValue(v);
    bool any = false;
    for (size_t d = 0; d < t.shape().size(); ++d) {
      const Shape &sh = t.shape();
      if (sh[d] <= 1) continue;
      int64_t inner = 1;
      for (size_t k = d + 1; k < sh.size(); ++k) inner *= sh[k];
      int64_t outer = 1;
      for (size_t k = 0; k < d; ++k) outer *= sh[k];
      const size_t rowBytes = size_t(inner) * dtypeSize(t.dtype()), sliceBytes = rowBytes * size_t(sh[d]);
      const auto *p = static_cast<const uint8_t *>(t.raw());
      bool uniform = true;
      for (int64_t o = 0; o < outer && uniform; ++o)
        for (int64_t j = 1; j < sh[d] && uniform; ++j)
          uniform = std::memcmp(p + size_t(o) * sliceBytes, p + size_t(o) * sliceBytes + size_t(j) * rowBytes,
                                rowBytes) == 0;
      if (!uniform) continue;
      Shape cut = sh;
      cut[d] = 1;
      Tensor c(t.dtype(), cut);
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(static_cast<uint8_t *>(c.raw()) + size_t(o) * rowBytes, p + size_t(o) * sliceBytes, rowBytes);
      t = std::move(c);
      any = true;
    }
    return any ? g.addConst(g.value(v).name + ".cut", std::move(t)) : v;
  }
  static bool isSmallConst(Graph &g, ValueId v, const PassOptions &opts) {
    return v != kNoValue && g.value(v).kind == ValueKind::Const && g.constValue(v) &&
           numElements(g.type(v).shape) <= opts.foldLimit;
  }
  // Right-aligned numpy broadcasting of `s` into `acc`.
  static bool broadcastInto(Shape &acc, const Shape &s) {
    if (s.size() > acc.size()) acc.insert(acc.begin(), s.size() - acc.size(), 1);
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t &a = acc[acc.size() - s.size() + k];
      if (s[k] == a || s[k] == 1) continue;
      if (a != 1) return false;
      a = s[k];
    }
    return true;
  }
  // op i := Expand(small, its output's shape).
  void becomeExpand(Graph &g, int32_t i, ValueId small) {
    const ValueId out = g.ops[size_t(i)].outputs[0];
    const Shape full = g.type(out).shape;
    Tensor shape(DType::I64, Shape{int64_t(full.size())});
    for (size_t k = 0; k < full.size(); ++k) shape.data<int64_t>()[k] = full[k];
    ValueId shapeConst = g.addConst(g.value(out).name + ".shape", std::move(shape));
    Op &op = g.ops[size_t(i)];
    op.type = "Expand";
    op.inputs = {small, shapeConst};
    op.attrs = Attrs();
    small_[out] = small;
  }
  llvm::Error constantOfShape(Graph &g, int32_t i) {
    const Op &op = g.ops[size_t(i)];
    const ValueId out = op.outputs[0];
    const TensorType t = g.type(out);
    Tensor one(t.dtype, Shape(t.shape.size(), 1));
    const Attr *value = op.attrs.get("value");
    if (value && value->kind == Attr::Kind::Tensor) {
      if (value->t.numel() != 1 || value->t.dtype() != t.dtype) return llvm::Error::success();
      std::memcpy(one.raw(), value->t.raw(), one.nbytes());
    } else {
      std::memset(one.raw(), 0, one.nbytes()); // ONNX: float 0 by default
    }
    ValueId small = g.addConst(g.value(out).name + ".small", std::move(one));
    becomeExpand(g, i, small);
    return llvm::Error::success();
  }

  static inline const std::set<std::string> kElementwise = {
      "Add",  "Sub",   "Mul",     "Div",   "Where", "And",          "Or",          "Xor",
      "Not",  "Equal", "Less",    "LessOrEqual", "Greater", "GreaterOrEqual", "Cast", "Neg",
      "Abs",  "Max",   "Min",     "IsInf", "IsNaN", "Identity"};
  FoldMemo &memo_;
  std::unordered_map<ValueId, ValueId> small_; // full-size value -> its small constant
};

llvm::Error specialize(Graph &g, const PassOptions &opts) {
  FoldMemo memo;
  BroadcastFolder broadcasts(memo);
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].dead) continue;
    const OpSchema *schema = lookupOpSchema(g.ops[i].type);
    if (!schema) return opError(g, g.ops[i], "unsupported op");
    for (ValueId in : g.ops[i].inputs)
      if (in != kNoValue && !g.type(in).known())
        return opError(g, g.ops[i], "input '" + g.value(in).name + "' has no type (is it defined?)");
    // The schema's required inputs (the first minInputs) cannot be omitted ("").
    for (size_t k = 0; k < size_t(schema->minInputs) && k < g.ops[i].inputs.size(); ++k)
      if (g.ops[i].inputs[k] == kNoValue)
        return opError(g, g.ops[i], "input " + llvm::Twine(k) + " is required, but the node omits it");
    InferContext ctx(g, int32_t(i));
    if (schema->infer)
      if (auto e = schema->infer(ctx)) return e;
    for (ValueId o : g.ops[i].outputs)
      if (o != kNoValue && !g.type(o).known())
        return opError(g, g.ops[i], "type inference left output '" + g.value(o).name + "' untyped");
    if (allOutputsConst(g, g.ops[i])) {
      g.ops[i].dead = true;
      continue;
    }
    if (!canFold(g, g.ops[i], *schema, opts)) {
      if (schema->foldable)
        if (auto e = broadcasts.visit(g, int32_t(i), opts)) return e;
      continue;
    }
    if (const std::vector<ValueId> *earlier =
            memo.find(g, g.ops[i].type, g.ops[i].attrs, g.ops[i].inputs, g.ops[i].outputs)) {
      Op &op = g.ops[i];
      for (size_t k = 0; k < op.outputs.size(); ++k)
        if (op.outputs[k] != kNoValue) g.replaceAllUses(op.outputs[k], (*earlier)[k]);
      op.dead = true;
      continue;
    }
    std::vector<Tensor> held;
    held.reserve(g.ops[i].inputs.size());
    std::vector<const Tensor *> ins;
    for (ValueId in : g.ops[i].inputs) {
      if (in == kNoValue) {
        ins.push_back(nullptr);
        continue;
      }
      auto t = g.tensorOf(in);
      if (!t) return t.takeError();
      held.push_back(*t);
      ins.push_back(&held.back());
    }
    auto outs = evalOp(g, int32_t(i), ins);
    if (!outs) return outs.takeError();
    Op &op = g.ops[i];
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      if (op.outputs[k] == kNoValue) continue;
      Value &v = g.value(op.outputs[k]);
      v.kind = ValueKind::Const;
      v.data = std::move((*outs)[k]);
      v.producer = -1;
    }
    op.dead = true;
    memo.add(g, op.type, op.attrs, op.inputs, op.outputs);
  }
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
