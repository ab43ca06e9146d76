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

} // namespace megac::plan
