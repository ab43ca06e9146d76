#include "codegen/MicroBatchPolicy.h"

#include <algorithm>

namespace megac::codegen {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

llvm::Expected<int> parseMicroBatchesPerPass(llvm::StringRef s) {
  if (s == "auto") return -1;
  int n = 0;
  if (s.getAsInteger(10, n) || n < 1)
    return err("--micro-batches-per-pass must be auto or a count >= 1 that divides --grad-accum, got '" + s + "'");
  return n;
}

llvm::Error applyMicroBatchPolicy(plan::Plan &p, ScheduleOptions &o) {
  const int64_t accum = std::max<int64_t>(p.optimizer().grad_accum(), 1);
  if (o.microBatches > 0) {
    if (accum % o.microBatches != 0)
      return err("--micro-batches-per-pass " + llvm::Twine(o.microBatches) + " does not divide --grad-accum " +
                 llvm::Twine(accum) + ": each pass carries the same number of micro-batches");
    return buildStreamSchedule(p, o);
  }
  // The most per pass that fits; one pass of one where none does (compile
  // then reports the plan over budget).
  for (int64_t n = accum; n >= 1; --n) {
    if (accum % n != 0) continue;
    o.microBatches = int(n);
    if (auto e = buildStreamSchedule(p, o)) return e;
    if (n == 1 || p.schedule().device_bytes() <= o.gpuBudgetBytes) return llvm::Error::success();
  }
  return llvm::Error::success();
}

} // namespace megac::codegen
