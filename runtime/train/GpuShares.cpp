#include "runtime/train/GpuShares.h"

#include "runtime/train/NonFinite.h"

#include <cstdlib>

namespace megac::runtime {

std::optional<GpuFaultInjection> gpuFaultInjectionFromEnvironment() {
  auto v = injectionFromEnvironment("MEGAC_INJECT_GPU_FAULT");
  if (!v) return std::nullopt;
  return GpuFaultInjection{int(std::strtol(v->first.c_str(), nullptr, 10)), v->second};
}

} // namespace megac::runtime
