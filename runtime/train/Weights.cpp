#include "runtime/train/Weights.h"

#include "runtime/core/Hash.h"
#include "runtime/core/TensorFile.h"
#include "runtime/cpu/Kernel.h"

#include "onnx.pb.h"


#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

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
static void initialize(const plan::Parameter &p, int32_t index, float *dst, uint64_t seed) {
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

llvm::Expected<int> loadInitialWeights(const plan::Plan &plan, HostState &state, const WeightOptions &opts) {
  std::string path = opts.onnxPath.empty() ? plan.model_path() : opts.onnxPath;
  onnx::ModelProto model;
  bool haveModel = false;
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (buf) {
    if (!parseWholeMessage((*buf)->getBuffer(), model)) return err(path + ": not a valid ONNX model");
    haveModel = true;
  } else if (!opts.init) {
    return err(path + ": cannot read the model's weights (" + buf.getError().message() +
               "); pass --weights FILE, or --init to initialize them");
  }
  std::map<std::string, const onnx::TensorProto *> inits;
  if (haveModel)
    for (const auto &t : model.graph().initializer()) inits[t.name()] = &t;
  std::string baseDir = std::string(llvm::sys::path::parent_path(path));
  if (baseDir.empty()) baseDir = ".";
  int initialized = 0;
  for (int i = 0; i < plan.parameters_size(); ++i) {
    const plan::Parameter &p = plan.parameters(i);
    float *dst = state.params.data() + p.host_offset();
    auto it = inits.find(p.name());
    const onnx::TensorProto *tp = it == inits.end() ? nullptr : it->second;
    bool external = tp && hasExternalData(*tp);
    std::optional<ExternalLocation> loc;
    if (external) {
      auto l = externalLocation(*tp, p.name());
      if (!l) return l.takeError();
      llvm::SmallString<256> f(baseDir);
      llvm::sys::path::append(f, l->location);
      if (llvm::sys::fs::exists(f)) loc = *l;
    }
    if (!tp || (external && !loc)) {
      if (!opts.init)
        return err(path + ": parameter '" + p.name() + "' has no data; pass --init to initialize it");
      initialize(p, i, dst, opts.seed);
      ++initialized;
      continue;
    }
    if (tp->data_type() != onnx::TensorProto::FLOAT)
      return err(path + ": parameter '" + p.name() + "' is not float32");
    int64_t n = 1;
    for (int64_t d : tp->dims()) n *= d;
    if (n != p.numel())
      return err(path + ": parameter '" + p.name() + "' has " + llvm::Twine(n) + " elements, the plan expects " +
                 llvm::Twine(p.numel()) + ": the plan was compiled from another model");
    if (loc) {
      if (auto e = readExternal(baseDir, *loc, p.name(), dst, p.numel() * 4)) return std::move(e);
    } else {
      auto t = tensorFromProto(*tp, p.name());
      if (!t) return err(path + ": " + llvm::toString(t.takeError()));
      std::memcpy(dst, t->raw(), size_t(p.numel()) * 4);
    }
  }
  if (opts.onnxPath.empty() && initialized == 0 && plan.weights_hash() != 0 &&
      hashParameters(plan, state) != plan.weights_hash())
    return err(path + ": the weights differ from those the plan was compiled with; recompile, or pass --weights " +
               path + " to use them anyway");
  return initialized;
}

} // namespace megac::runtime
