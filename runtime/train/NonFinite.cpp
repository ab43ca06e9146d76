#include "runtime/train/NonFinite.h"

#include <cstdlib>

#include "runtime/cpu/Kernel.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace megac::runtime {

char NonFiniteError::ID = 0;

void NonFiniteError::log(llvm::raw_ostream &os) const {
  os << what_;
  if (!updated_.empty())
    os << "; the AdamW update of " << updated_
       << " had already been applied in this step (their weights changed; the step is not checkpointed)";
}

std::string nonFiniteGradientMessage(const std::string &unit, const std::string &param, const std::string &value,
                                     int64_t element, const std::string &where) {
  return "unit '" + unit + "' backward: the gradient of '" + param + "' holds " + value + " at element " +
         std::to_string(element) + (where.empty() ? "" : " (" + where + ")") +
         "; its update and the rest of the step were stopped";
}

std::string updatedUnitList(const std::vector<std::string> &names, const std::vector<std::string> &unreadRowsOf) {
  std::string s, rows;
  for (const std::string &n : names) s += (s.empty() ? "unit '" : ", '") + n + "'";
  for (const std::string &n : unreadRowsOf) rows += (rows.empty() ? "the rows no token read of unit '" : ", '") + n + "'";
  return s.empty() || rows.empty() ? s + rows : s + " and " + rows;
}

std::optional<std::pair<std::string, int64_t>> injectionFromEnvironment(const char *variable) {
  const char *v = std::getenv(variable);
  if (!v || !*v) return std::nullopt;
  const std::string s(v);
  const size_t at = s.rfind('@');
  return std::pair<std::string, int64_t>{s.substr(0, at),
                                         at == std::string::npos ? 1 : std::strtoll(s.c_str() + at + 1, nullptr, 10)};
}

std::optional<NanInjection> nanInjectionFromEnvironment() {
  auto v = injectionFromEnvironment("MEGAC_INJECT_NAN");
  if (!v) return std::nullopt;
  return NanInjection{v->first, v->second};
}

int64_t firstNonFinite(const float *data, int64_t n) {
  constexpr int64_t kChunk = 1 << 20;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<int64_t> first(size_t(chunks), -1);
  cpu::parallelFor(chunks, kChunk, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t i = c * kChunk, e = std::min(n, i + kChunk); i < e; ++i)
        if (!std::isfinite(data[i])) {
          first[size_t(c)] = i;
          break;
        }
  });
  for (int64_t f : first)
    if (f >= 0) return f;
  return -1;
}

} // namespace megac::runtime
