#include "runtime/train/GpuShares.h"

#include <cstdlib>

namespace megac::runtime {

std::optional<GpuFaultInjection> gpuFaultInjectionFromEnvironment() {
  const char *v = std::getenv("MEGAC_INJECT_GPU_FAULT");
  if (!v || !*v)
    return std::nullopt;
  GpuFaultInjection f;
  std::string s(v);
  const size_t at = s.rfind('@');
  f.gpu = int(std::strtol(s.substr(0, at).c_str(), nullptr, 10));
  if (at != std::string::npos)
    f.step = std::strtoll(s.c_str() + at + 1, nullptr, 10);
  return f;
}

} // namespace megac::runtime
