#include "runtime/cuda/GpuProgram.h"

#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GradSumKernels.h"
#include "runtime/cuda/LtMatmul.h"
#include "runtime/cuda/OpTimer.h"
#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/PackCache.h"

#include <atomic>

namespace megac::cuda {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

static std::atomic<uint64_t> writtenInPlace{0}, addedInPlace{0}, argumentViewsRead{0};
uint64_t resultsWrittenInPlace() { return writtenInPlace.load(); }
uint64_t resultsAddedInPlace() { return addedInPlace.load(); }
uint64_t argumentViewsReadInPlace() { return argumentViewsRead.load(); }

llvm::Expected<GpuProgram> GpuProgram::prepare(const plan::Program &p, const std::string &what, GpuContext &gpu) {
  GpuProgram g;
  g.what_ = what;
  g.backward_ = llvm::StringRef(what).endswith("backward");
  const int n = p.values_size();
  if (p.arena_offsets_size() != n)
    return err(what + ": the plan has no device memory plan for this program (compiled by an older megac?): "
                      "recompile the model with megac compile");
  g.arenaBytes_ = p.arena_bytes();
  g.values_.resize(size_t(n));
  g.offsets_.assign(p.arena_offsets().begin(), p.arena_offsets().end());
  g.hostConstants_.resize(size_t(n));
  g.constantAddr_.assign(size_t(n), nullptr);
  for (int i = 0; i < n; ++i) {
    const auto &v = p.values(i);
    DeviceTensor &t = g.values_[size_t(i)];
    t.dtype = DType(int(v.type().dtype()));
    t.shape.assign(v.type().shape().begin(), v.type().shape().end());
    if (v.kind() == plan::Program::Value::CONSTANT) {
      if (v.constant().data().empty() && t.nbytes() != 0)
        return err(what + ": constant '" + v.name() + "' has no data (the model was compiled without weights)");
      auto c = plan::fromProto(v.constant());
      if (!c) return err(what + ": constant '" + v.name() + "': " + llvm::toString(c.takeError()));
      g.hostConstants_[size_t(i)] = *c;
    }
    int64_t off = g.offsets_[size_t(i)];
    if (off >= 0 && (off % 256 != 0 || off + int64_t(t.nbytes()) > g.arenaBytes_))
      return err(what + ": value '" + v.name() + "' lies outside the program's arena");
  }
  auto checkId = [&](int32_t id) { return id >= -1 && id < n; };
  std::vector<bool> isArgument(size_t(n), false);
  for (int32_t a : p.arguments()) {
    if (!checkId(a) || a < 0) return err(what + ": an argument refers to no value");
    isArgument[size_t(a)] = true;
  }
  for (int k = 0; k < p.ops_size(); ++k) {
    const auto &o = p.ops(k);
    Op op;
    op.type = o.type();
    op.name = o.name();
    op.kernel = lookupGpuKernel(op.type);
    if (!op.kernel) return err(what + ": op '" + o.name() + "' (" + op.type + ") has no CUDA kernel");
    for (int32_t in : o.inputs()) {
      if (!checkId(in)) return err(what + ": op '" + o.name() + "' reads a value that does not exist");
      op.inputs.push_back(in);
    }
    for (int32_t out : o.outputs()) {
      if (!checkId(out)) return err(what + ": op '" + o.name() + "' writes a value that does not exist");
      if (out >= 0 && g.offsets_[size_t(out)] < 0)
        return err(what + ": op '" + o.name() + "' output '" + p.values(out).name() + "' has no place in the arena");
      op.outputs.push_back(out);
    }
    auto attrs = plan::fromProto(o.attributes());
    if (!attrs) return err(what + ": op '" + o.name() + "': " + llvm::toString(attrs.takeError()));
    op.attrs = std::move(*attrs);
    g.ops_.push_back(std::move(op));
  }
  g.arguments_.assign(p.arguments().begin(), p.arguments().end());
  for (int32_t r : p.results()) {
    if (!checkId(r) || r < 0) return err(what + ": a result refers to no value");
    g.results_.push_back(r);
  }
  g.findBindableResults();
  g.findArgumentViews();
  const plan::PackCacheUse cacheUse = plan::packCacheUse(p);
  g.packCache_.assign(g.ops_.size(), {0, 0});
  for (size_t k = 0; k < g.ops_.size(); ++k)
    if (g.ops_[k].type == "MatMul" || g.ops_[k].type == "Gemm")
      for (size_t i = 0; i < 2; ++i) g.packCache_[k][i] = cacheUse.stores[k][i] ? kPackStore : kPackFind;
  // The scratch each op asks for, from shapes and constants (no data yet).
  for (const Op &op : g.ops_) {
    if (!op.kernel->workspace) continue;
    std::vector<DeviceTensor> ins, outs;
    GpuKernelContext ctx{op.attrs, gpu, {}, {}, {}};
    ins.reserve(op.inputs.size());
    outs.reserve(op.outputs.size());
    for (int32_t in : op.inputs) {
      ins.push_back(in >= 0 ? g.values_[size_t(in)] : DeviceTensor{});
      ctx.inputs.push_back(in >= 0 ? &ins.back() : nullptr);
      ctx.constants.push_back(in >= 0 && g.hostConstants_[size_t(in)].defined() ? &g.hostConstants_[size_t(in)]
                                                                                 : nullptr);
    }
    for (int32_t out : op.outputs) {
      outs.push_back(out >= 0 ? g.values_[size_t(out)] : DeviceTensor{});
      ctx.outputs.push_back(out >= 0 ? &outs.back() : nullptr);
    }
    g.workspaceBytes_ = std::max(g.workspaceBytes_, op.kernel->workspace(ctx));
  }
  return std::move(g);
}

// A view whose output has its input's offset shares the input's bytes (the
// arena's rule, runtime/plan/ArenaRules.h): both live at the view, so equal
// offsets of a nonempty value mean the same bytes.
void GpuProgram::findBindableResults() {
  const size_t n = values_.size();
  std::vector<int32_t> root(n), writer(n, -1);
  for (size_t v = 0; v < n; ++v) root[v] = int32_t(v);
  for (size_t k = 0; k < ops_.size(); ++k) {
    const Op &op = ops_[k];
    for (int32_t out : op.outputs)
      if (out >= 0) writer[size_t(out)] = int32_t(k);
    if (!plan::isViewOp(op.type) || op.inputs.empty() || op.outputs.empty()) continue;
    const int32_t in = op.inputs[0], out = op.outputs[0];
    if (in >= 0 && out >= 0 && offsets_[size_t(in)] >= 0 && offsets_[size_t(out)] == offsets_[size_t(in)] &&
        values_[size_t(out)].nbytes() > 0)
      root[size_t(out)] = root[size_t(in)];
  }
  bindable_.assign(results_.size(), {});
  for (size_t i = 0; i < results_.size(); ++i) {
    const int32_t r = root[size_t(results_[i])];
    if (offsets_[size_t(r)] < 0 || writer[size_t(r)] < 0 || values_[size_t(r)].nbytes() == 0) continue;
    bool shared = false; // another result (or the same value twice) has these bytes
    for (size_t j = 0; j < results_.size(); ++j)
      shared |= j != i && root[size_t(results_[j])] == r;
    if (shared) continue;
    BindableResult &b = bindable_[i];
    for (size_t v = 0; v < n; ++v)
      if (root[v] == r) b.values.push_back(int32_t(v));
    b.writer = writer[size_t(r)];
    const Op &w = ops_[size_t(b.writer)];
    b.writerOutput0 = !w.outputs.empty() && w.outputs[0] == r;
    bool onlyViewsRead = true;
    for (const Op &op : ops_)
      for (int32_t in : op.inputs)
        if (in >= 0 && root[size_t(in)] == r)
          onlyViewsRead &= plan::isViewOp(op.type) && !op.outputs.empty() && op.outputs[0] >= 0 &&
                           root[size_t(op.outputs[0])] == r;
    // alpha 1: alpha * AB + C rounds once where the sum of alpha * AB, rounded, would round twice.
    b.addsInPlace = w.type == "Gemm" && w.outputs.size() == 1 && b.writerOutput0 &&
                    (w.inputs.size() < 3 || w.inputs[2] < 0) && w.attrs.getFloat("alpha", 1.0f) == 1.0f &&
                    onlyViewsRead;
  }
}

void GpuProgram::findArgumentViews() {
  std::vector<bool> fromArgument(values_.size(), false);
  for (int32_t a : arguments_) fromArgument[size_t(a)] = true;
  for (const Op &op : ops_) {
    if (!plan::isViewOp(op.type) || op.inputs.empty() || op.outputs.size() != 1) continue;
    const int32_t in = op.inputs[0], out = op.outputs[0];
    if (in < 0 || out < 0 || !fromArgument[size_t(in)] || hostConstants_[size_t(out)].defined()) continue;
    argumentViews_.push_back({in, out});
    fromArgument[size_t(out)] = true;
  }
}

int64_t GpuProgram::constantBytes() const {
  int64_t total = 0;
  for (const Tensor &t : hostConstants_)
    if (t.defined()) total += align256(int64_t(t.nbytes()));
  return total;
}

llvm::Error GpuProgram::bindConstants(uint8_t *regionBase, const std::vector<int64_t> &offsets, cudaStream_t stream) {
  for (size_t i = 0; i < hostConstants_.size(); ++i) {
    const Tensor &t = hostConstants_[i];
    if (!t.defined()) continue;
    if (t.nbytes() == 0) {
      constantAddr_[i] = regionBase ? regionBase : reinterpret_cast<uint8_t *>(256); // never dereferenced
      continue;
    }
    if (i >= offsets.size() || offsets[i] < 0 || !regionBase)
      return err(what_ + ": constant " + llvm::Twine(i) + " has no place in the plan's CONSTANTS region");
    uint8_t *p = regionBase + offsets[i];
    constantAddr_[i] = p;
    if (t.nbytes()) MEGAC_CUDA_TRY(cudaMemcpyAsync(p, t.raw(), t.nbytes(), cudaMemcpyHostToDevice, stream));
  }
  // The host copies stay: kernels read shape-like constants from them.
  MEGAC_CUDA_TRY(cudaStreamSynchronize(stream));
  return llvm::Error::success();
}

llvm::Error GpuProgram::run(GpuContext &ctx, void *arena, void *workspace, const std::vector<void *> &args,
                            const std::vector<void *> &results, size_t addFrom) const {
  if (args.size() != arguments_.size() || results.size() != results_.size())
    return err(what_ + ": called with " + llvm::Twine(args.size()) + " arguments and " +
               llvm::Twine(results.size()) + " results, expected " + llvm::Twine(arguments_.size()) + " and " +
               llvm::Twine(results_.size()));
  std::vector<DeviceTensor> env = values_;
  auto *arenaBase = static_cast<uint8_t *>(arena);
  for (size_t i = 0; i < env.size(); ++i) {
    if (constantAddr_[i]) env[i].data = constantAddr_[i];
    else if (offsets_[i] >= 0) env[i].data = arenaBase + offsets_[i];
    else env[i].data = nullptr;
  }
  for (size_t i = 0; i < args.size(); ++i) env[size_t(arguments_[i])].data = args[i];
  // Results written (or added) in place: their values take the caller's
  // memory, where it lies apart from every argument and other result.
  std::vector<bool> bound(results_.size(), false), boundValue(env.size(), false);
  std::vector<uint8_t> opBinding(ops_.size(), 0); // 1: output 0 is a result, 2: and adds to it
  auto apart = [&](size_t i) {
    const auto p = reinterpret_cast<uintptr_t>(results[i]);
    const size_t bytes = values_[size_t(results_[i])].nbytes();
    auto clear = [&](const void *q, size_t qBytes) {
      const auto x = reinterpret_cast<uintptr_t>(q);
      return !q || qBytes == 0 || x + qBytes <= p || p + bytes <= x;
    };
    for (size_t j = 0; j < args.size(); ++j)
      if (!clear(args[j], values_[size_t(arguments_[j])].nbytes())) return false;
    for (size_t j = 0; j < results.size(); ++j)
      if (j != i && !clear(results[j], values_[size_t(results_[j])].nbytes())) return false;
    return true;
  };
  for (size_t i = 0; i < results_.size(); ++i) {
    const BindableResult &b = bindable_[i];
    const bool adds = i >= addFrom;
    if (b.writer < 0 || (adds && !b.addsInPlace) || !results[i] || !apart(i)) continue;
    for (int32_t v : b.values) env[size_t(v)].data = results[i], boundValue[size_t(v)] = true;
    bound[i] = true;
    ++(adds ? addedInPlace : writtenInPlace);
    if (b.writerOutput0) opBinding[size_t(b.writer)] = adds ? 2 : 1;
  }
  // Views of arguments read the caller's bytes, which the arena's view rule
  // cannot give them (they are not the arena's), so that their kernels copy
  // nothing; not a view that is a result written in place, nor one of a view
  // that is.
  std::vector<bool> inCaller(env.size(), false);
  for (int32_t a : arguments_) inCaller[size_t(a)] = env[size_t(a)].data != nullptr;
  for (const ArgumentView &v : argumentViews_) {
    if (!inCaller[size_t(v.in)] || boundValue[size_t(v.out)]) continue;
    env[size_t(v.out)].data = env[size_t(v.in)].data;
    inCaller[size_t(v.out)] = true;
    ++argumentViewsRead;
  }
  ++ctx.programRun; // env's tensors identify this run's values to the kernels (the attention stash)
  // Products may share the bf16 copy of an operand (GpuContext::packedA)
  // while only products and views run between them, and take those stored
  // in the pack cache during this run.
  struct PackReuse {
    GpuContext &ctx;
    explicit PackReuse(GpuContext &c) : ctx(c) { ++ctx.packEpoch, ctx.packReuse = true, ctx.packCache.clear(); }
    ~PackReuse() { ++ctx.packEpoch, ctx.packReuse = false, ctx.packCache.clear(); }
  } packReuse(ctx);
  for (size_t k = 0; k < ops_.size(); ++k) {
    const Op &op = ops_[k];
    GpuKernelContext kc{op.attrs, ctx, {}, {}, {}};
    kc.outputIsResult = opBinding[k] >= 1;
    kc.accumulateOutput = opBinding[k] == 2;
    kc.inputs.reserve(op.inputs.size());
    for (int32_t in : op.inputs) {
      kc.inputs.push_back(in >= 0 ? &env[size_t(in)] : nullptr);
      kc.constants.push_back(in >= 0 && hostConstants_[size_t(in)].defined() ? &hostConstants_[size_t(in)] : nullptr);
    }
    for (int32_t out : op.outputs) kc.outputs.push_back(out >= 0 ? &env[size_t(out)] : nullptr);
    kc.workspace = workspace;
    kc.workspaceBytes = workspaceBytes_;
    kc.packCache = packCache_[k];
    const bool keepsPack = op.type == "MatMul" || op.type == "Gemm" ||
                           (plan::isViewOp(op.type) && kc.inputs.size() >= 1 && kc.outputs.size() == 1 && kc.inputs[0] &&
                            kc.outputs[0] && kc.inputs[0]->data == kc.outputs[0]->data);
    if (!keepsPack) ++ctx.packEpoch;
    if (ctx.timer)
      if (auto e = ctx.timer->begin(op.type + (backward_ ? " (backward)" : ""), ctx.stream)) return e;
    if (auto e = op.kernel->run(kc)) return err(what_ + ": op '" + op.name + "': " + llvm::toString(std::move(e)));
    if (!keepsPack) ++ctx.packEpoch;
    // The copies of what this op wrote over are stale (a view that shares
    // its input's bytes writes nothing).
    for (const DeviceTensor *out : kc.outputs)
      if (out && out->data && !(kc.inputs.size() >= 1 && kc.inputs[0] && kc.inputs[0]->data == out->data &&
                                plan::isViewOp(op.type)))
        ctx.packCache.dropOverlapping(out->data, out->nbytes());
    if (ctx.timer)
      if (auto e = ctx.timer->end(ctx.stream)) return e;
  }
  for (size_t i = 0; i < results_.size(); ++i) {
    if (bound[i]) continue; // written (or added) there by its op
    const DeviceTensor &v = env[size_t(results_[i])];
    if (i >= addFrom) {
      if (v.dtype != DType::F32) return err(what_ + ": result " + llvm::Twine(i) + " is added to, but is not fp32");
      if (v.data == results[i]) return err(what_ + ": result " + llvm::Twine(i) + " is added to itself");
      MEGAC_CUDA_TRY(launchAddInto(static_cast<float *>(results[i]), static_cast<const float *>(v.data),
                                   int64_t(v.nbytes() / 4), ctx.stream));
      continue;
    }
    if (v.data != results[i] && v.nbytes())
      MEGAC_CUDA_TRY(cudaMemcpyAsync(results[i], v.data, v.nbytes(), cudaMemcpyDeviceToDevice, ctx.stream));
  }
  return llvm::Error::success();
}

} // namespace megac::cuda
