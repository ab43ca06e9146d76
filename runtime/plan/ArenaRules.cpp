#include "runtime/plan/ArenaRules.h"

#include "runtime/core/CheckedSize.h"

namespace megac::plan {

int64_t typeBytes(const TensorType &t) {
  size_t elem = dtypeSize(megac::DType(int(t.dtype())));
  if (elem == 0) return -1;
  // Shapes come from the plan file: past 2^62 bytes is no tensor (and no sum of them wraps).
  auto n = checkedNbytes(t.shape(), int64_t(elem), int64_t(1) << 62);
  return n ? *n : -1;
}

int64_t tensorBytes(const TensorType &t) {
  auto dt = megac::DType(int(t.dtype()));
  if (dt == megac::DType::Undefined) return 0;
  int64_t n = 1;
  for (int64_t d : t.shape()) n *= d;
  return n * int64_t(megac::dtypeSize(dt));
}

bool hasStashedOperands(const Program::Op &op) {
  if (op.type() != "megac.AttentionGrad") return false;
  for (const Attribute &a : op.attributes())
    if (a.name() == kStashedOperandsAttr) return a.value_case() == Attribute::kI && a.i() != 0;
  return false;
}

bool readsBytes(const Program::Op &op, int index) {
  return !(index >= 1 && index <= 3 && hasStashedOperands(op));
}

bool isViewOp(llvm::StringRef t) {
  return t == "Reshape" || t == "Squeeze" || t == "Unsqueeze" || t == "Flatten" || t == "Identity";
}

std::vector<int32_t> viewRoots(const Program &p) {
  const int32_t n = p.values_size();
  std::vector<int32_t> root(static_cast<size_t>(n));
  for (int32_t v = 0; v < n; ++v) root[size_t(v)] = v;
  for (const Program::Op &op : p.ops()) {
    if (!isViewOp(op.type()) || op.inputs_size() < 1 || op.outputs_size() < 1) continue;
    const int32_t in = op.inputs(0), out = op.outputs(0);
    if (in < 0 || in >= n || out < 0 || out >= n || p.values(in).kind() != Program::Value::TEMP) continue;
    if (typeBytes(p.values(in).type()) != typeBytes(p.values(out).type())) continue;
    root[size_t(out)] = root[size_t(in)];
  }
  return root;
}

} // namespace megac::plan
