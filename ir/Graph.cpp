#include "ir/Graph.h"

#include "runtime/core/TensorFile.h"

namespace megac::ir {

std::string TensorType::str() const {
  if (isSequence) return std::string("seq<") + dtypeName(dtype) + ">";
  return std::string(dtypeName(dtype)) + shapeToString(shape);
}

const char *valueKindName(ValueKind k) {
  switch (k) {
  case ValueKind::Input: return "input";
  case ValueKind::Param: return "param";
  case ValueKind::Const: return "const";
  case ValueKind::Result: return "result";
  }
  return "?";
}

llvm::Expected<ValueId> Graph::addValue(Value v) {
  if (byName_.count(v.name))
    return graphError(*this, "duplicate value name '" + v.name + "'");
  ValueId id = ValueId(values.size());
  byName_[v.name] = id;
  values.push_back(std::move(v));
  return id;
}

std::string Graph::uniqueName(const std::string &hint) {
  std::string base = hint.empty() ? "v" : hint;
  if (!byName_.count(base)) return base;
  for (;;) {
    std::string n = base + "." + std::to_string(nextUnique_++);
    if (!byName_.count(n)) return n;
  }
}

ValueId Graph::addValueUnique(Value v) {
  v.name = uniqueName(v.name);
  ValueId id = ValueId(values.size());
  byName_[v.name] = id;
  values.push_back(std::move(v));
  return id;
}

ValueId Graph::addConst(const std::string &nameHint, Tensor t) {
  Value v;
  v.name = nameHint;
  v.kind = ValueKind::Const;
  v.type.dtype = t.dtype();
  v.type.shape = t.shape();
  v.data = std::move(t);
  return addValueUnique(std::move(v));
}

int32_t Graph::addOp(Op op) {
  int32_t idx = int32_t(ops.size());
  for (ValueId o : op.outputs)
    if (o != kNoValue) values[size_t(o)].producer = idx;
  ops.push_back(std::move(op));
  return idx;
}

int32_t Graph::insertOp(size_t pos, Op op) {
  ops.insert(ops.begin() + long(pos), std::move(op));
  recomputeProducers();
  return int32_t(pos);
}

void Graph::recomputeProducers() {
  for (auto &v : values)
    if (v.kind == ValueKind::Result) v.producer = -1;
  for (size_t i = 0; i < ops.size(); ++i)
    if (!ops[i].dead)
      for (ValueId o : ops[i].outputs)
        if (o != kNoValue) values[size_t(o)].producer = int32_t(i);
}

ValueId Graph::lookup(llvm::StringRef n) const {
  auto it = byName_.find(n);
  return it == byName_.end() ? kNoValue : it->second;
}

llvm::Expected<Tensor> Graph::tensorOf(ValueId id) {
  Value &v = value(id);
  if (v.data) return *v.data;
  if (!v.external)
    return graphError(*this, "value '" + v.name + "' has no data (the model carries no bytes for it)");
  const ExternalData &ex = *v.external;
  Tensor t(v.type.dtype, v.type.shape);
  if (auto e = readExternal(baseDir, {ex.location, ex.offset, ex.length}, v.name, t.raw(), int64_t(t.nbytes())))
    return graphError(*this, llvm::toString(std::move(e)));
  v.data = t;
  return t;
}

const Tensor *Graph::constValue(ValueId id) {
  if (id == kNoValue) return nullptr;
  Value &v = value(id);
  if (v.kind != ValueKind::Const) return nullptr;
  if (!v.data && v.external) {
    auto t = tensorOf(id);
    if (!t) {
      llvm::consumeError(t.takeError());
      return nullptr;
    }
  }
  return v.data ? &*v.data : nullptr;
}

void Graph::replaceAllUses(ValueId from, ValueId to) {
  for (Op &op : ops)
    for (ValueId &i : op.inputs)
      if (i == from) i = to;
  for (ValueId &o : outputs)
    if (o == from) o = to;
}

std::vector<std::vector<int32_t>> Graph::computeUsers() const {
  std::vector<std::vector<int32_t>> users(values.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].dead) continue;
    for (ValueId v : ops[i].inputs)
      if (v != kNoValue && (users[size_t(v)].empty() || users[size_t(v)].back() != int32_t(i)))
        users[size_t(v)].push_back(int32_t(i));
  }
  return users;
}

void Graph::compact() {
  std::vector<bool> used(values.size(), false);
  for (ValueId v : inputs) used[size_t(v)] = true;
  for (ValueId v : outputs) used[size_t(v)] = true;
  for (const Op &op : ops) {
    if (op.dead) continue;
    for (ValueId v : op.inputs)
      if (v != kNoValue) used[size_t(v)] = true;
    for (ValueId v : op.outputs)
      if (v != kNoValue) used[size_t(v)] = true;
  }
  // Parameters are kept even when unused: they are part of the model's state.
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].kind == ValueKind::Param) used[i] = true;
  std::vector<ValueId> remap(values.size(), kNoValue);
  std::vector<Value> nv;
  for (size_t i = 0; i < values.size(); ++i)
    if (used[i]) {
      remap[i] = ValueId(nv.size());
      nv.push_back(std::move(values[i]));
    }
  values = std::move(nv);
  std::vector<Op> nops;
  for (Op &op : ops) {
    if (op.dead) continue;
    for (ValueId &v : op.inputs)
      if (v != kNoValue) v = remap[size_t(v)];
    for (ValueId &v : op.outputs)
      if (v != kNoValue) v = remap[size_t(v)];
    nops.push_back(std::move(op));
  }
  ops = std::move(nops);
  for (ValueId &v : inputs) v = remap[size_t(v)];
  for (ValueId &v : outputs) v = remap[size_t(v)];
  byName_.clear();
  for (size_t i = 0; i < values.size(); ++i) byName_[values[i].name] = ValueId(i);
  recomputeProducers();
}

static std::string where(const Graph &g) {
  return g.sourcePath.empty() ? std::string("<graph>") : g.sourcePath;
}

llvm::Error opError(const Graph &g, const Op &op, const llvm::Twine &msg) {
  std::string s = where(g) + ": node '" + op.name + "' (" + op.type;
  if (g.opset) s += ", opset " + std::to_string(g.opset);
  s += "): " + msg.str();
  return llvm::createStringError(llvm::inconvertibleErrorCode(), s);
}

llvm::Error graphError(const Graph &g, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), where(g) + ": " + msg.str());
}

} // namespace megac::ir
