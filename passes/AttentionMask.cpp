#include "passes/AttentionMask.h"
#include "passes/SymbolicMask.h"

#include "runtime/core/Hash.h"
#include "runtime/cpu/Kernel.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

namespace megac::passes {

using namespace ir;

MaskView::MaskView(const Tensor &t, int64_t rowBegin) : t_(t), rowBegin_(rowBegin) {
  m4_ = Shape(4 - size_t(t.rank()), 1);
  m4_.insert(m4_.end(), t.shape().begin(), t.shape().end());
  strides_ = rowMajorStrides(m4_);
  for (size_t d = 0; d < 4; ++d)
    if (m4_[d] == 1) strides_[d] = 0;
}

namespace {

// Adds one row (query `query`, keys at p[j * stride]) to facts: keys up to
// the query visible and the rest masked (causal), all visible, none seen.
template <class T>
void scanRow(const T *p, int64_t stride, int64_t kvSeq, int64_t query, MaskKind kind, MaskFacts &facts) {
  auto all = [&](int64_t from, int64_t to, auto pred) {
    for (int64_t j = from; j < to; ++j)
      if (!pred(double(p[j * stride]))) return false;
    return true;
  };
  auto visible = [&](double x) { return kind.visible(x); };
  const int64_t split = std::clamp<int64_t>(query + 1, 0, kvSeq);
  const bool head = all(0, split, visible);
  if (facts.causal) facts.causal = head && all(split, kvSeq, [&](double x) { return kind.masked(x); });
  if (facts.allVisible) facts.allVisible = head && all(split, kvSeq, visible);
  if (!facts.fullyMaskedRow) facts.fullyMaskedRow = all(0, kvSeq, [&](double x) { return kind.fullyMasked(x); });
}

} // namespace

void scanMask(const MaskView &m, MaskKind kind, int64_t qSeq, int64_t kvSeq, MaskFacts &facts) {
  const Shape &s = m.shape4();
  // One row serving every query is causal only for a single query.
  if (qSeq != kvSeq || (m.oneRowForAll() && qSeq > 1)) facts.causal = false;
  const int64_t rows = s[0] * s[1] * s[2];
  std::mutex merge;
  // Rows in parallel, each range into its own facts, merged after.
  cpu::parallelFor(rows, kvSeq, [&](int64_t begin, int64_t end) {
    MaskFacts f = facts;
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r % s[2], h = r / s[2] % s[1], b = r / (s[2] * s[1]);
      const int64_t at = m.offset(b, h, i), stride = m.keyStride(), query = m.rowBegin() + i;
      switch (m.tensor().dtype()) {
      case DType::Bool:
      case DType::U8: scanRow(m.tensor().data<uint8_t>() + at, stride, kvSeq, query, kind, f); break;
      case DType::F32: scanRow(m.tensor().data<float>() + at, stride, kvSeq, query, kind, f); break;
      case DType::F64: scanRow(m.tensor().data<double>() + at, stride, kvSeq, query, kind, f); break;
      default: {
        std::vector<double> row(static_cast<size_t>(kvSeq));
        for (int64_t j = 0; j < kvSeq; ++j) row[size_t(j)] = m.at(b, h, i, j);
        scanRow(row.data(), 1, kvSeq, query, kind, f);
      }
      }
      if (!f.causal && !f.allVisible && f.fullyMaskedRow) break; // nothing more to learn
    }
    std::lock_guard<std::mutex> lock(merge);
    facts.causal &= f.causal;
    facts.allVisible &= f.allVisible;
    facts.fullyMaskedRow |= f.fullyMaskedRow;
  });
}

namespace {

const std::set<std::string> &rowwiseOps() {
  static const std::set<std::string> ops = {
      "Add",  "Sub",   "Mul",  "Div",         "Where",   "And",            "Or",   "Xor", "Not",
      "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Cast", "Neg", "Abs", "Max",
      "Min",  "IsInf", "IsNaN", "Identity", "Expand"};
  return ops;
}

} // namespace

bool elementwiseMaskOp(const std::string &opType) { return rowwiseOps().count(opType) != 0; }

namespace {

// Right-aligned numpy broadcasting of b into a; false where they clash.
bool broadcastInto(Shape &a, const Shape &b) {
  if (b.size() > a.size()) a.insert(a.begin(), b.size() - a.size(), 1);
  for (size_t k = 0; k < b.size(); ++k) {
    int64_t &x = a[a.size() - b.size() + k];
    const int64_t y = b[k];
    if (x == y || y == 1) continue;
    if (x != 1) return false;
    x = y;
  }
  return true;
}

// Evaluates rows [r0, r1) of a mask, along its second-to-last dim (qSeq
// queries), through elementwise ops and Expands from constants: each value
// on the way is cut to those rows where its row dim has qSeq entries.
class RowBlockEvaluator {
public:
  RowBlockEvaluator(Graph &g, int64_t qSeq, const PassOptions &opts) : g_(g), qSeq_(qSeq), opts_(opts) {}

  // Whether v can be evaluated that way (at most kMaxOps ops).
  bool computable(ValueId v) {
    int ops = 0;
    return computable(v, ops);
  }

  std::optional<Tensor> rows(ValueId v, int64_t r0, int64_t r1) {
    memo_.clear();
    return eval(v, r0, r1);
  }

private:
  static constexpr int kMaxOps = 64;

  bool computable(ValueId v, int &ops) {
    if (v == kNoValue) return false;
    if (const Tensor *t = g_.constValue(v)) return t->numel() <= opts_.foldLimit;
    const Value &val = g_.value(v);
    if (val.producer < 0 || !val.type.known() || val.type.isSequence) return false;
    const Op &op = g_.ops[size_t(val.producer)];
    if (op.dead || op.outputs.size() != 1 || !rowwiseOps().count(op.type) || ++ops > kMaxOps) return false;
    if (op.type == "Expand") return op.inputs.size() == 2 && g_.constValue(op.inputs[1]) && computable(op.inputs[0], ops);
    for (ValueId in : op.inputs)
      if (!computable(in, ops)) return false;
    return true;
  }

  // The rows of constant t, a copy cut along its row dim where that has qSeq entries.
  Tensor cut(const Tensor &t, int64_t r0, int64_t r1) const {
    if (t.rank() < 2 || t.dim(-2) != qSeq_ || qSeq_ == 1) return t;
    Shape s = t.shape();
    const int64_t inner = s.back() * int64_t(dtypeSize(t.dtype()));
    int64_t outer = 1;
    for (size_t k = 0; k + 2 < s.size(); ++k) outer *= s[k];
    s[s.size() - 2] = r1 - r0;
    Tensor out(t.dtype(), s);
    const auto *src = static_cast<const uint8_t *>(t.raw());
    auto *dst = static_cast<uint8_t *>(out.raw());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + o * (r1 - r0) * inner, src + (o * qSeq_ + r0) * inner, size_t((r1 - r0) * inner));
    return out;
  }

  std::optional<Tensor> eval(ValueId v, int64_t r0, int64_t r1) {
    if (auto it = memo_.find(v); it != memo_.end()) return it->second;
    std::optional<Tensor> result;
    if (const Tensor *t = g_.constValue(v)) {
      result = cut(*t, r0, r1);
    } else {
      const Op &op = g_.ops[size_t(g_.value(v).producer)];
      std::vector<Tensor> held;
      held.reserve(op.inputs.size());
      Shape shape;
      const size_t operands = op.type == "Expand" ? 1 : op.inputs.size();
      for (size_t k = 0; k < operands; ++k) {
        auto in = eval(op.inputs[k], r0, r1);
        if (!in || !broadcastInto(shape, in->shape())) return std::nullopt;
        held.push_back(std::move(*in));
      }
      if (op.type == "Expand") { // its target, with the row dim cut like the values
        Shape target = g_.constValue(op.inputs[1])->toInt64Vector();
        if (target.size() >= 2 && target[target.size() - 2] == qSeq_) target[target.size() - 2] = r1 - r0;
        if (!broadcastInto(shape, target)) return std::nullopt;
        held.push_back(Tensor::fromVector<int64_t>(DType::I64, {int64_t(shape.size())}, shape));
      }
      std::vector<const Tensor *> ins;
      for (const Tensor &t : held) ins.push_back(&t);
      Tensor out(g_.type(v).dtype, shape);
      cpu::KernelContext ctx{op.attrs, ins, {&out}};
      if (auto e = cpu::runKernel(op.type, ctx)) {
        llvm::consumeError(std::move(e));
        return std::nullopt;
      }
      result = std::move(out);
    }
    memo_.emplace(v, *result);
    return result;
  }

  Graph &g_;
  const int64_t qSeq_;
  const PassOptions &opts_;
  std::map<ValueId, Tensor> memo_;
};

// About this many entries of the mask per block of rows.
constexpr int64_t kBlockEntries = int64_t(1) << 21; // 8 MiB of f32: malloc keeps reusing it

} // namespace

std::optional<MaskFacts> compileTimeMaskFacts(Graph &g, ValueId v, MaskKind kind, int64_t qSeq, int64_t kvSeq,
                                              const PassOptions &opts) {
  if (v == kNoValue || !g.type(v).known() || g.type(v).shape.size() > 4) return std::nullopt;
  MaskFacts facts;
  // A constant, or one broadcast by Expand (specialize leaves a mask too large
  // to fold that way): broadcasting it is what the Expand did.
  const Tensor *t = g.constValue(v);
  if (!t) {
    const Value &val = g.value(v);
    if (val.producer >= 0) {
      const Op &e = g.ops[size_t(val.producer)];
      if (!e.dead && e.type == "Expand" && !e.inputs.empty()) t = g.constValue(e.inputs[0]);
    }
  }
  if (t) {
    if (t->rank() > 4) return std::nullopt;
    scanMask(MaskView(*t), kind, qSeq, kvSeq, facts);
    return facts;
  }
  // Computed from constants: read from its ops where the recognizer knows them.
  if (auto s = symbolicMaskFacts(g, v, kind, qSeq, kvSeq)) {
    ++maskReadingStats().recognized;
    return s;
  }
  return evaluatedMaskFacts(g, v, kind, qSeq, kvSeq, opts, /*note=*/true);
}

std::optional<MaskFacts> evaluatedMaskFacts(Graph &g, ValueId v, MaskKind kind, int64_t qSeq, int64_t kvSeq,
                                            const PassOptions &opts, bool note) {
  if (v == kNoValue || !g.type(v).known() || g.type(v).shape.size() > 4) return std::nullopt;
  MaskFacts facts;
  // A block of rows at a time. Only a causal
  // or an all-visible mask is of use (nothing else could be kept as a
  // constant), so the reading stops at the first row that is neither.
  const Shape &shape = g.type(v).shape;
  if (shape.size() < 2 || shape[shape.size() - 2] != qSeq) return std::nullopt;
  RowBlockEvaluator rows(g, qSeq, opts);
  if (!rows.computable(v)) return std::nullopt;
  const int64_t perRow = std::max<int64_t>(1, numElements(shape) / qSeq);
  const int64_t block = std::clamp<int64_t>(kBlockEntries / perRow, 1, qSeq);
  if (note)
    llvm::errs() << "megac: note: the attention mask '" << g.value(v).name
                 << "' is not a pattern megac recognizes from its ops; evaluating its " << numElements(shape)
                 << " entries a block of rows at a time (compile time grows with seq squared)\n";
  ++maskReadingStats().evaluated;
  for (int64_t r0 = 0; r0 < qSeq; r0 += block) {
    const int64_t r1 = std::min(qSeq, r0 + block);
    auto part = rows.rows(v, r0, r1);
    if (!part || part->rank() > 4) return std::nullopt;
    maskReadingStats().entriesEvaluated += part->numel();
    scanMask(MaskView::block(*part, r0), kind, qSeq, kvSeq, facts);
    if (!facts.causal && !facts.allVisible) return std::nullopt;
  }
  return facts;
}

MaskReadingStats &maskReadingStats() {
  static MaskReadingStats stats;
  return stats;
}

std::string MaskFactsCache::structure(Graph &g, ValueId v, int &opsLeft) {
  if (auto it = structures_.find(v); it != structures_.end()) return it->second;
  std::string s;
  if (const Tensor *t = g.constValue(v)) {
    s = "const " + g.type(v).str() + " " + std::to_string(fnv1a(kFnvOffset, t->raw(), t->nbytes()));
  } else {
    const Value &val = g.value(v);
    if (val.producer < 0 || --opsLeft < 0) return "";
    const Op &op = g.ops[size_t(val.producer)];
    if (op.dead || op.outputs.size() != 1 || (!rowwiseOps().count(op.type) && !symbolicMaskOp(op.type))) return "";
    s = op.type;
    // Cast's "to" is the one attribute these ops have; any other keeps the op apart.
    for (const auto &[name, attr] : op.attrs.all())
      s += name == "to" ? " to=" + std::to_string(op.attrs.getInt("to", 0)) : " #" + std::to_string(v);
    s += "(";
    for (ValueId in : op.inputs) {
      std::string i = in == kNoValue ? "_" : structure(g, in, opsLeft);
      if (i.empty()) return "";
      s += i + ", ";
    }
    s += ")";
  }
  structures_.emplace(v, s);
  return s;
}

std::optional<MaskFacts> MaskFactsCache::get(Graph &g, ValueId v, MaskKind kind, int64_t qSeq, int64_t kvSeq,
                                             const PassOptions &opts) {
  int opsLeft = 64;
  std::string s = v == kNoValue ? "" : structure(g, v, opsLeft);
  if (s.empty()) return std::nullopt; // neither a constant nor computed from constants
  auto key = std::make_tuple(std::move(s), kind.boolean, kind.inverted, qSeq, kvSeq);
  auto it = known_.find(key);
  if (it == known_.end()) it = known_.emplace(key, compileTimeMaskFacts(g, v, kind, qSeq, kvSeq, opts)).first;
  return it->second;
}

} // namespace megac::passes
