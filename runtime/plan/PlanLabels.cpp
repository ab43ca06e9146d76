#include "runtime/plan/PlanLabels.h"

#include "llvm/Support/Format.h"

namespace megac::plan {

const char *deviceCategoryName(DeviceRegion::Kind k) {
  switch (k) {
  case DeviceRegion::WEIGHT_SLOT: return "weight slots";
  case DeviceRegion::GRAD_SLOT: return "grad slots";
  case DeviceRegion::CHECKPOINT: return "checkpoints";
  case DeviceRegion::ACTIVATION_GRAD: return "activation grads";
  case DeviceRegion::ARENA: return "arena";
  case DeviceRegion::WORKSPACE: return "workspace";
  case DeviceRegion::DATA: return "data";
  case DeviceRegion::CONSTANTS: return "constants";
  case DeviceRegion::SAVED: return "saved activations";
  case DeviceRegion::RESIDENT: return "resident units";
  case DeviceRegion::MOMENT_SLOT: return "moment slots";
  case DeviceRegion::LOADED_CHECKPOINT: return "checkpoints back";
  case DeviceRegion::WEIGHT_COPY: return "weight copies";
  default: return "unknown";
  }
}

void printOpTimes(llvm::raw_ostream &os, llvm::StringRef heading, const std::vector<OpTypeTime> &rows) {
  double all = 0;
  for (const OpTypeTime &t : rows) all += t.seconds;
  os << heading << "\n";
  os << "  op                                       launches  ms per step   share\n";
  for (const OpTypeTime &t : rows)
    os << llvm::format("  %-40s %8lld %12.3f %6.1f%%\n", t.label.c_str(), (long long)t.launches, 1e3 * t.seconds,
                       all > 0 ? 100.0 * t.seconds / all : 0.0);
  os << "  total" << llvm::format("%56.3f\n", 1e3 * all);
}

} // namespace megac::plan
