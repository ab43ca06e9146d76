#include "runtime/train/WeightReader.h"

#include "runtime/core/Safetensors.h"
#include "runtime/train/NonFinite.h"

#include <algorithm>
#include <cstdio>

namespace megac::runtime {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

llvm::Expected<MatchedLoad> loadMatched(WeightReader &source, const std::vector<WantedTensor> &wanted,
                                        const std::vector<float *> &dsts, const NameMatchOptions &opts) {
  std::vector<OfferedTensor> offered;
  for (const SourceTensor &t : source.tensors) {
    const char *st = safetensorsDTypeName(t.dtype);
    offered.push_back({t.name, t.shape, st ? st : dtypeName(t.dtype)});
  }
  auto match = matchWeightNames(wanted, offered, opts);
  if (!match) return match.takeError();
  MatchedLoad out{std::move(*match), {}};
  std::vector<std::pair<int32_t, float *>> reads;
  for (size_t i = 0; i < wanted.size(); ++i)
    if (out.match.source[i] >= 0) reads.push_back({out.match.source[i], dsts[i]});
  if (auto e = source.read(reads, out.stats)) return std::move(e);
  for (const auto &[j, dst] : reads) {
    const SourceTensor &t = source.tensors[size_t(j)];
    int64_t bad = firstNonFinite(dst, t.numel);
    if (bad >= 0)
      return err(source.given + ": tensor '" + t.name + "' holds " + std::to_string(dst[bad]) + " at element " +
                 llvm::Twine(bad) + ": the weights are corrupt");
  }
  return out;
}

std::string loadSummary(int32_t loaded, size_t total, const char *noun, const WeightReadStats &stats) {
  const double b = double(stats.bytes);
  char line[200];
  std::snprintf(line, sizeof line, "loaded %d of %zu %s (%.2f %s read from %d file%s in %.2f s, %.2f GB/s)", loaded,
                total, noun, b >= 1e9 ? b / 1e9 : b / 1e6, b >= 1e9 ? "GB" : "MB", stats.files,
                stats.files == 1 ? "" : "s", stats.seconds, b / 1e9 / std::max(stats.seconds, 1e-9));
  return line;
}

} // namespace megac::runtime
