#include "runtime/train/Weights.h"

#include "runtime/core/Hash.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/train/NonFinite.h"

#include "llvm/Support/FileSystem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

namespace megac::runtime {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

uint64_t hashParameters(const plan::Plan &plan, const HostState &state) {
  uint64_t h = kFnvOffset;
  for (const plan::Parameter &p : plan.parameters())
    h = fnv1a(h, state.params.data() + p.host_offset(), size_t(p.numel()) * 4);
  return h;
}

// Normal draws come in blocks of 2^20 elements, each from its own generator
// seeded by (seed, parameter, block): the values do not depend on the number
// of threads, and a multi-billion-parameter model initializes in seconds.
void initializeParameter(const plan::Parameter &p, int32_t index, float *dst, uint64_t seed) {
  switch (p.init()) {
  case plan::Parameter::ONES: std::fill(dst, dst + p.numel(), 1.0f); return;
  case plan::Parameter::ZEROS: std::fill(dst, dst + p.numel(), 0.0f); return;
  default: {
    constexpr int64_t kBlock = 1 << 20;
    const float stddev = p.init_std() > 0 ? p.init_std() : 0.02f;
    const int64_t blocks = (p.numel() + kBlock - 1) / kBlock;
    cpu::parallelFor(blocks, kBlock, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        std::mt19937_64 rng((seed * 0x9E3779B97F4A7C15ull + uint64_t(index) + 1) ^ (uint64_t(b) * 0xD1B54A32D192ED03ull));
        std::normal_distribution<float> normal(0.0f, stddev);
        for (int64_t i = b * kBlock, e = std::min(p.numel(), (b + 1) * kBlock); i < e; ++i) dst[i] = normal(rng);
      }
    });
  }
  }
}

// --weights: every parameter from the source by name, or (--init-missing) initialized.
static llvm::Expected<LoadedWeights> loadFromSource(const plan::Plan &plan, HostState &state,
                                                    const WeightOptions &opts, const WeightReaders &readers) {
  if (!readers.openWeights) return err("--weights: no weights reader was given to the runtime");
  auto src = readers.openWeights(opts.weightsPath);
  if (!src) return src.takeError();
  WeightReader &s = **src;
  std::vector<WantedTensor> wanted;
  std::vector<float *> dsts;
  for (const plan::Parameter &p : plan.parameters()) {
    wanted.push_back({p.name(), Shape(p.type().shape().begin(), p.type().shape().end()), p.tied_embedding_head()});
    dsts.push_back(state.params.data() + p.host_offset());
  }
  NameMatchOptions mo;
  mo.graphLabel = "the plan";
  mo.sourceLabel = opts.weightsPath;
  mo.allowMissing = opts.initMissing;
  auto load = loadMatched(s, wanted, dsts, mo);
  if (!load) return load.takeError();
  const NameMatch *match = &load->match;

  LoadedWeights out;
  llvm::SmallString<256> absolute(opts.weightsPath); // recorded in checkpoints: valid from any directory
  llvm::sys::fs::make_absolute(absolute);
  out.source = std::string(absolute);
  out.report.push_back("weights: " + opts.weightsPath + " (" + s.describe() + ")");
  for (const std::string &n : match->notes) out.report.push_back("weights: " + n);
  for (int i = 0; i < plan.parameters_size(); ++i)
    if (match->source[size_t(i)] >= 0)
      out.names.push_back({plan.parameters(i).name(), s.tensors[size_t(match->source[size_t(i)])].name});
  out.report.push_back("weights: " + loadSummary(match->matched, size_t(plan.parameters_size()), "parameters", load->stats));
  if (!match->missing.empty()) {
    std::string names;
    for (int32_t i : match->missing) {
      initializeParameter(plan.parameters(i), i, state.params.data() + plan.parameters(i).host_offset(), opts.seed);
      if (out.initialized++ < 20) names += " '" + plan.parameters(i).name() + "'";
    }
    if (out.initialized > 20) names += " ...";
    out.report.push_back("--init-missing: initialized " + std::to_string(out.initialized) +
                         " parameters the weights lack (matrices N(0, 0.02), norm scales 1, biases 0; seed " +
                         std::to_string(opts.seed) + "):" + names);
  }
  return out;
}

llvm::Expected<LoadedWeights> loadInitialWeights(const plan::Plan &plan, HostState &state, const WeightOptions &opts,
                                                 const WeightReaders &readers) {
  if (!opts.weightsPath.empty()) return loadFromSource(plan, state, opts, readers);
  if (opts.initMissing) return err("--init-missing goes with --weights (it initializes what the weights lack)");
  if (!readers.openModel) return err("no model reader was given to the runtime");
  const std::string path = plan.model_path();
  auto model = readers.openModel(plan, opts.init);
  if (!model) return model.takeError();
  WeightReader &r = **model;
  std::map<std::string, int32_t> byName; // the model's weights by their exact names
  for (size_t j = 0; j < r.tensors.size(); ++j) byName[r.tensors[j].name] = int32_t(j); // the last of a name, as before
  int initialized = 0;
  WeightReadStats stats;
  for (int i = 0; i < plan.parameters_size(); ++i) {
    const plan::Parameter &p = plan.parameters(i);
    float *dst = state.params.data() + p.host_offset();
    auto it = byName.find(p.name());
    if (it == byName.end()) {
      if (!opts.init)
        return err(path + ": parameter '" + p.name() +
                   "' has no data; pass --weights with pretrained weights, or --init to initialize it");
      initializeParameter(p, i, dst, opts.seed);
      ++initialized;
      continue;
    }
    const SourceTensor &t = r.tensors[size_t(it->second)];
    if (t.dtype != DType::F32) return err(path + ": parameter '" + p.name() + "' is not float32");
    if (t.numel != p.numel())
      return err(path + ": parameter '" + p.name() + "' has " + llvm::Twine(t.numel) + " elements, the plan expects " +
                 llvm::Twine(p.numel()) + ": the plan was compiled from another model");
    // One at a time, in plan order: the first bad parameter is the one an error names.
    if (auto e = r.read({{it->second, dst}}, stats)) return std::move(e);
  }
  for (const plan::Parameter &p : plan.parameters()) {
    int64_t bad = firstNonFinite(state.params.data() + p.host_offset(), p.numel());
    if (bad >= 0)
      return err(path + ": parameter '" + p.name() + "' holds " +
                 std::to_string(state.params[size_t(p.host_offset() + bad)]) + " at element " + llvm::Twine(bad) +
                 ": the model file's weights are corrupt");
  }
  if (initialized == 0 && plan.weights_hash() != 0 && hashParameters(plan, state) != plan.weights_hash())
    return err(path + ": the weights differ from those the plan was compiled with; recompile, or pass --weights " +
               path + " to use them anyway");
  LoadedWeights out;
  out.initialized = initialized;
  if (initialized)
    out.report.push_back("--init: initialized " + std::to_string(initialized) + " of " +
                         std::to_string(plan.parameters_size()) +
                         " parameters that have no data (matrices N(0, 0.02), norm scales 1, biases 0; seed " +
                         std::to_string(opts.seed) + ")");
  return out;
}

} // namespace megac::runtime
