#include "ir/OpSchema.h"

#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <mutex>

namespace megac::ir {

static llvm::StringMap<OpSchema> &table() {
  static llvm::StringMap<OpSchema> t;
  return t;
}

static void ensureRegistered() {
  static std::once_flag once;
  std::call_once(once, [] {
    registerElementwiseSchemas();
    registerShapeSchemas();
    registerReductionSchemas();
    registerNNSchemas();
    registerTrainingSchemas();
  });
}

void registerOpSchema(OpSchema s) {
  std::string k = s.type;
  table()[k] = std::move(s);
}

const OpSchema *lookupOpSchema(llvm::StringRef type) {
  ensureRegistered();
  auto it = table().find(type);
  return it == table().end() ? nullptr : &it->second;
}

std::vector<std::string> registeredOpTypes() {
  ensureRegistered();
  std::vector<std::string> r;
  for (auto &e : table()) r.push_back(e.first().str());
  std::sort(r.begin(), r.end());
  return r;
}

InferContext::InferContext(Graph &g, int32_t opIndex) : g_(g), opIndex_(opIndex) {}

const TensorType *InferContext::inputType(size_t i) const {
  if (!hasInput(i)) return nullptr;
  return &g_.type(op().inputs[i]);
}

const Tensor *InferContext::inputConst(size_t i) const {
  if (!hasInput(i)) return nullptr;
  return g_.constValue(op().inputs[i]);
}

llvm::Expected<const Tensor *> InferContext::requireConst(size_t i, llvm::StringRef what) const {
  if (const Tensor *t = inputConst(i)) return t;
  std::string n = hasInput(i) ? g_.value(op().inputs[i]).name : std::string("<missing>");
  return error("input " + llvm::Twine(i) + " ('" + n + "', the " + what +
               ") must be known at compile time, but it depends on run-time data");
}

void InferContext::setOutput(size_t i, TensorType t) {
  if (i < numOutputs() && op().outputs[i] != kNoValue) g_.value(op().outputs[i]).type = std::move(t);
}

void InferContext::setOutputValue(size_t i, Tensor t) {
  if (i >= numOutputs() || op().outputs[i] == kNoValue) return;
  Value &v = g_.value(op().outputs[i]);
  v.type = TensorType{t.dtype(), t.shape(), false};
  v.kind = ValueKind::Const;
  v.data = std::move(t);
  v.producer = -1;
}

TensorType &InferContext::outputType(size_t i) { return g_.value(op().outputs[i]).type; }

llvm::Expected<int64_t> normalizeAxis(const InferContext &c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    return c.error("axis " + llvm::Twine(axis) + " is out of range for rank " + llvm::Twine(rank));
  return axis < 0 ? axis + rank : axis;
}

llvm::Expected<Shape> broadcastShapes(const InferContext &c, const Shape &a, const Shape &b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) out[i] = da;
    else if (da == 1) out[i] = db;
    else
      return c.error("shapes " + shapeToString(a) + " and " + shapeToString(b) + " do not broadcast");
  }
  return out;
}

} // namespace megac::ir
