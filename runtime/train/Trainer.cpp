#include "runtime/train/Trainer.h"

#include "runtime/train/HostMemory.h"
#include "runtime/train/PlanCompute.h"
#include "runtime/train/NonFinite.h"

#include "runtime/core/DType.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/plan/StreamLayout.h"
#include "runtime/plan/TokenRows.h"
#include "runtime/plan/UnitPrograms.h"

#include "llvm/ADT/ScopeExit.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace megac::runtime {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

CpuOptions CpuOptions::fromEnvironment() {
  CpuOptions o;
  if (const char *v = std::getenv("MEGAC_STREAM_SEED"); v && *v) o.streamSeed = std::strtoull(v, nullptr, 10);
  if (const char *v = std::getenv("MEGAC_CHECK_READS"); v && *v) o.checkReads = std::string(v) != "0";
  if (const char *v = std::getenv("MEGAC_CPU_DIRECT"); v && *v) o.streamSchedule = std::string(v) == "0";
  return o;
}

llvm::Error Trainer::preparePrograms() {
  for (const plan::Template &tp : plan_.templates()) {
    auto f = PreparedProgram::prepare(tp.forward(), "template '" + tp.name() + "' forward");
    if (!f) return f.takeError();
    auto b = PreparedProgram::prepare(tp.backward(), "template '" + tp.name() + "' backward");
    if (!b) return b.takeError();
    forward_.push_back(std::move(*f));
    backward_.push_back(std::move(*b));
    if (plan::hasKeepPrograms(tp)) {
      auto fk = PreparedProgram::prepare(tp.forward_keep(), "template '" + tp.name() + "' forward_keep");
      if (!fk) return fk.takeError();
      auto bk = PreparedProgram::prepare(tp.backward_kept(), "template '" + tp.name() + "' backward_kept");
      if (!bk) return bk.takeError();
      forwardKeep_.emplace(forward_.size() - 1, std::move(*fk));
      backwardKept_.emplace(backward_.size() - 1, std::move(*bk));
    }
  }
  for (int u = 0; u < plan_.units_size(); ++u)
    if (plan_.units(u).keep_activations() && !forwardKeep_.count(size_t(plan_.units(u).template_id())))
      return err("unit '" + plan_.units(u).name() + "' keeps its activations, but its template has no keep programs");
  return llvm::Error::success();
}

llvm::Error Trainer::initHostState(int64_t simulatedDeviceBytes) {
  for (int i = 0; i < plan_.activations_size(); ++i)
    if (plan_.activations(i).kind() == plan::Activation::LOSS) lossId_ = i;
  if (lossId_ < 0) return err("the plan has no loss");
  for (const plan::Parameter &p : plan_.parameters())
    hostElements_ = std::max(hostElements_, p.host_offset() + (p.numel() + 63) / 64 * 64);
  if (auto e = checkHostMemory(plan_, readHostMemory(), simulatedDeviceBytes)) return e;
  bf16Layout_ = plan::bf16WeightLayout(plan_);
  try {
    state_.params.assign(size_t(hostElements_), 0.0f);
    state_.m.assign(size_t(hostElements_), 0.0f);
    state_.v.assign(size_t(hostElements_), 0.0f);
    bf16Weights_.assign(size_t(bf16Layout_.elements), 0);
  } catch (const std::bad_alloc &) {
    state_ = {};
    bf16Weights_ = {};
    return err("cannot allocate the host state: " + llvm::Twine(hostElements_ * 12 + bf16Layout_.elements * 2) +
               " bytes of fp32 master weights, AdamW moments and bf16 weights to stream");
  }
  bf16Stale_ = true;
  const plan::Optimizer &o = plan_.optimizer();
  hyper_ = {o.lr(), o.beta1(), o.beta2(), o.eps(), o.weight_decay()};
  injectNan_ = nanInjectionFromEnvironment();
  injectGpuFault_ = gpuFaultInjectionFromEnvironment();
  earlyRowParams_ = earlyRowParameters(plan_);
  return llvm::Error::success();
}

Tensor Trainer::paramTensor(int32_t id) const {
  const plan::Parameter &p = plan_.parameters(id);
  Tensor t(DType::F32, Shape(p.type().shape().begin(), p.type().shape().end()));
  std::memcpy(t.raw(), state_.params.data() + p.host_offset(), size_t(p.numel()) * 4);
  return t;
}

void Trainer::updateParam(int32_t id, const float *grad, float lr, float gradScale, int64_t step) {
  const size_t off = size_t(plan_.parameters(id).host_offset());
  updateParamAt(id, state_.params.data() + off, grad, state_.m.data() + off, state_.v.data() + off, lr, gradScale, step,
                bf16Of(id));
}

void Trainer::updateParamAt(int32_t id, float *param, const float *grad, float *m, float *v, float lr,
                            float gradScale, int64_t step, uint16_t *bf16) {
  const plan::Parameter &p = plan_.parameters(id);
  AdamWHyper h = hyper_;
  h.lr = lr;
  adamwUpdateParallel(param, grad, m, v, p.numel(), step < 0 ? state_.step : step, h, p.decay(), gradScale, bf16);
}

void Trainer::appendTableRows(std::vector<AdamWSegment> &segments, int32_t id, const std::vector<RowRun> &runs,
                              const float *grad) {
  const plan::Parameter &p = plan_.parameters(id);
  const size_t off = size_t(p.host_offset());
  appendRowSegments(segments, p, runs, state_.params.data() + off, grad, state_.m.data() + off, state_.v.data() + off,
                    bf16Of(id));
}

void Trainer::stepReadRows(int32_t id, const std::vector<RowRun> &read, const float *grad, float lr) {
  std::vector<AdamWSegment> segments;
  appendTableRows(segments, id, read, grad);
  AdamWHyper h = hyper_;
  h.lr = lr;
  adamwUpdateSegments(segments, state_.step, h, 1.0f, cpu::numThreads());
}

bool Trainer::stepUnreadRows(int unit, const StepTokenRows *rows, float lr, int64_t step, int threads) {
  std::vector<AdamWSegment> segments;
  for (int32_t id : plan_.units(unit).parameters())
    if (const std::vector<RowRun> *read = rows ? rows->readOf(id) : nullptr)
      appendTableRows(segments, id, unreadRuns(*read, plan::parameterRows(plan_.parameters(id))), nullptr);
  if (segments.empty()) return false;
  AdamWHyper h = hyper_;
  h.lr = lr;
  adamwUpdateSegments(segments, step, h, 1.0f, threads);
  return true;
}

void Trainer::refreshBf16Weights() {
  bf16Stale_ = false;
  for (int i = 0; i < plan_.parameters_size(); ++i)
    if (uint16_t *dst = bf16Of(i)) {
      const float *src = state_.params.data() + plan_.parameters(i).host_offset();
      cpu::parallelFor(plan_.parameters(i).numel(), 4, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) dst[k] = floatToBf16(src[k]);
      });
    }
}

void Trainer::updateOrAccumulate(int32_t id, const float *grad, float lr, std::vector<int> &pending,
                                 std::vector<std::vector<float>> &partial) {
  const plan::Parameter &p = plan_.parameters(id);
  if (p.units_size() <= 1) {
    updateParam(id, grad, lr, 1.0f);
    return;
  }
  auto &acc = partial[size_t(id)];
  if (acc.empty()) acc.assign(grad, grad + p.numel());
  else
    for (int64_t i = 0; i < p.numel(); ++i) acc[size_t(i)] += grad[i];
  if (--pending[size_t(id)] > 0) return;
  updateParam(id, acc.data(), lr, 1.0f);
  pending[size_t(id)] = p.units_size(); // ready for the next step's (a step may start before this one's AdamW ends)
  acc.clear();
  acc.shrink_to_fit();
}

llvm::Expected<Tensor> Trainer::dataTensor(const plan::Activation &a, const Tensor &src) const {
  Shape want(a.type().shape().begin(), a.type().shape().end());
  if (src.shape() != want)
    return err("data '" + a.name() + "' has shape " + shapeToString(src.shape()) + ", the plan wants " +
               shapeToString(want));
  DType dt = DType(int(a.type().dtype()));
  if (src.dtype() == dt) return src;
  Tensor c(dt, src.shape());
  for (int64_t k = 0; k < src.numel(); ++k) c.setFromDouble(k, double(src.getAsInt(k)));
  return c;
}

llvm::Expected<std::vector<Tensor>> Trainer::runForward(const Tensor &tokens, const Tensor &targets,
                                                        std::vector<std::vector<Tensor>> *checkpoints,
                                                        std::vector<std::vector<Tensor>> *saved) {
  std::vector<Tensor> acts(size_t(plan_.activations_size()));
  for (int i = 0; i < plan_.activations_size(); ++i) {
    const plan::Activation &a = plan_.activations(i);
    if (a.kind() == plan::Activation::DATA_TOKENS || a.kind() == plan::Activation::DATA_TARGETS) {
      auto t = dataTensor(a, a.kind() == plan::Activation::DATA_TOKENS ? tokens : targets);
      if (!t) return t.takeError();
      acts[size_t(i)] = *t;
    }
  }
  if (checkpoints) checkpoints->assign(size_t(plan_.units_size()), {});
  if (saved) saved->assign(size_t(plan_.units_size()), {});
  for (int u = 0; u < plan_.units_size(); ++u) {
    const plan::Unit &unit = plan_.units(u);
    std::vector<Tensor> args;
    for (int32_t a : unit.activation_inputs()) args.push_back(acts[size_t(a)]);
    if (checkpoints) (*checkpoints)[size_t(u)] = args;
    for (int32_t p : unit.parameters()) args.push_back(paramTensor(p));
    // A unit that keeps its activations hands its backward the saved values
    // (after its outputs); only when there is a backward to hand them to.
    const bool keep = saved && unit.keep_activations();
    const size_t tid = size_t(unit.template_id());
    auto outs = keep ? forwardKeep_.at(tid).run(args, check_) : forward_[tid].run(args, check_);
    if (!outs) {
      checkUnit_ = u;
      checkBackward_ = false;
      return err("unit '" + unit.name() + "': " + llvm::toString(outs.takeError()));
    }
    for (int k = 0; k < unit.activation_outputs_size(); ++k) acts[size_t(unit.activation_outputs(k))] = (*outs)[size_t(k)];
    if (keep) (*saved)[size_t(u)].assign(outs->begin() + unit.activation_outputs_size(), outs->end());
  }
  return acts;
}


std::string Trainer::arithmetic() const {
  if (!emulateCompute_ || plan_.compute().empty() || plan_.compute() == "fp32") return "fp32";
  return plan_.compute() + " operands, emulated";
}

llvm::Expected<double> Trainer::evalLoss(const Tensor &tokens, const Tensor &targets) {
  PlanComputeScope compute(plan_, emulateCompute_);
  auto acts = runForward(tokens, targets, nullptr, nullptr);
  if (!acts) return acts.takeError();
  return (*acts)[size_t(lossId_)].getAsDouble(0);
}

llvm::Expected<double> Trainer::forwardBackward(const Tensor &tokens, const Tensor &targets, float lossScale,
                                                std::vector<float> *grads, float lr) {
  PlanComputeScope compute(plan_, emulateCompute_);
  std::vector<std::vector<Tensor>> checkpoints, saved;
  auto acts = runForward(tokens, targets, &checkpoints, &saved);
  if (!acts) return acts.takeError();
  double loss = (*acts)[size_t(lossId_)].getAsDouble(0);
  if (!std::isfinite(loss) && !plan_.optimizer().no_finite_check())
    return llvm::make_error<NonFiniteError>("the loss is " + std::to_string(loss) + " (forward, before any update)",
                                            "");
  std::vector<Tensor> gacts(acts->size());
  Tensor seed(DType(int(plan_.activations(lossId_).type().dtype())), {});
  seed.setFromDouble(0, lossScale);
  gacts[size_t(lossId_)] = seed;
  // Parameters used by several units (tied weights) collect their gradient
  // here until the last contribution arrives.
  std::vector<int> pending(size_t(plan_.parameters_size()));
  std::vector<std::vector<float>> partial(size_t(plan_.parameters_size()));
  for (int p = 0; p < plan_.parameters_size(); ++p) pending[size_t(p)] = plan_.parameters(p).units_size();

  for (int u = plan_.units_size() - 1; u >= 0; --u) {
    const plan::Unit &unit = plan_.units(u);
    const plan::Template &tp = plan_.templates(unit.template_id());
    std::vector<Tensor> args = checkpoints[size_t(u)];
    for (int32_t p : unit.parameters()) args.push_back(paramTensor(p));
    for (int32_t a : unit.activation_outputs()) {
      Tensor &g = gacts[size_t(a)];
      if (!g.raw()) {
        const plan::Activation &act = plan_.activations(a);
        g = Tensor(DType(int(act.type().dtype())), Shape(act.type().shape().begin(), act.type().shape().end()));
      }
      args.push_back(g);
    }
    if (unit.keep_activations()) args.insert(args.end(), saved[size_t(u)].begin(), saved[size_t(u)].end());
    auto res = unit.keep_activations() ? backwardKept_.at(size_t(unit.template_id())).run(args, check_)
                                       : backward_[size_t(unit.template_id())].run(args, check_);
    if (!res) {
      checkUnit_ = u;
      checkBackward_ = true;
      return err("unit '" + unit.name() + "' backward: " + llvm::toString(res.takeError()));
    }
    checkpoints[size_t(u)].clear();
    saved[size_t(u)].clear();
    size_t r = 0;
    for (int k = 0; k < unit.activation_inputs_size(); ++k) {
      if (!tp.input_has_gradient(k)) continue;
      Tensor &gin = (*res)[r++];
      Tensor &acc = gacts[size_t(unit.activation_inputs(k))];
      if (!acc.raw()) acc = gin;
      else {
        float *d = acc.data<float>();
        const float *s = gin.data<float>();
        for (int64_t i = 0; i < acc.numel(); ++i) d[i] += s[i];
      }
    }
    if (injectNan_ && injectNan_->at(unit.name(), state_.step) && unit.parameters_size() > 0)
      (*res)[r].data<float>()[0] = NAN;
    // Before any of this unit's parameters steps: its gradients must be finite.
    if (!plan_.optimizer().no_finite_check())
      for (int k = 0; k < unit.parameters_size(); ++k) {
        const Tensor &g = (*res)[r + size_t(k)];
        int64_t bad = firstNonFinite(g.data<float>(), g.numel());
        if (bad < 0) continue;
        std::vector<std::string> updated;
        if (!grads)
          for (int v = plan_.units_size() - 1; v > u; --v) updated.push_back(plan_.units(v).name());
        return llvm::make_error<NonFiniteError>(
            nonFiniteGradientMessage(unit.name(), plan_.parameters(unit.parameters(k)).name(),
                                     std::to_string(g.data<float>()[bad]), bad),
            updatedUnitList(updated));
      }
    for (int k = 0; k < unit.parameters_size(); ++k) {
      int32_t pid = unit.parameters(k);
      const plan::Parameter &p = plan_.parameters(pid);
      const Tensor &g = (*res)[r++];
      const float *gd = g.data<float>();
      if (grads) {
        float *dst = grads->data() + p.host_offset();
        for (int64_t i = 0; i < p.numel(); ++i) dst[i] += gd[i];
        continue;
      }
      updateOrAccumulate(pid, gd, lr, pending, partial);
    }
    for (int32_t a : unit.activation_outputs()) gacts[size_t(a)] = Tensor();
  }
  return loss;
}

llvm::Expected<std::string> Trainer::diagnoseNonFinite(const Tensor &tokens, const Tensor &targets) {
  syncHostState(/*callerWrites=*/false); // the direct path reads the host arrays
  PreparedProgram::NonFiniteAt at;
  at.op.clear();
  check_ = &at;
  checkUnit_ = -1;
  std::vector<float> scratch(size_t(hostElements_), 0.0f); // gradients go here: nothing is updated
  auto loss = Trainer::forwardBackward(tokens, targets, 1.0f, &scratch, 0.0f);
  check_ = nullptr;
  if (loss) return std::string();
  std::string why = llvm::toString(loss.takeError());
  if (at.op.empty() || checkUnit_ < 0) return why; // another failure: say it as it is
  const plan::Unit &unit = plan_.units(checkUnit_);
  // The program's arguments: the unit's activation inputs, its parameters,
  // then (backward) the gradients of its outputs and its saved values.
  std::string source = "finite inputs: the arithmetic overflows or divides by zero here (lower --lr, add --clip, "
                       "or compile with --compute fp32)";
  const int32_t a = at.argument, nIn = unit.activation_inputs_size(), nP = unit.parameters_size();
  if (a >= 0 && a < nIn)
    source = "the unit's input '" + plan_.activations(unit.activation_inputs(a)).name() + "', which holds it already";
  else if (a >= nIn && a < nIn + nP)
    source = "the weight '" + plan_.parameters(unit.parameters(a - nIn)).name() +
             "', which holds it already: it came with the weights this step started from";
  else if (a >= nIn + nP)
    source = "the gradient arriving from the next unit";
  return "unit '" + unit.name() + "' " + (checkBackward_ ? "backward" : "forward") + ", op '" + at.op + "' (" +
         at.opType + ") gives " + std::to_string(at.value) + " at element " + std::to_string(at.element) +
         " of its output " + std::to_string(at.output) + ", from " + source;
}

llvm::Expected<std::vector<float>> microBatchWeights(const std::vector<std::pair<Tensor, Tensor>> &microBatches,
                                                     int64_t ignoreIndex) {
  std::vector<int64_t> counted;
  int64_t total = 0;
  for (const auto &mb : microBatches) {
    const Tensor &t = mb.second;
    int64_t c = 0;
    for (int64_t i = 0; i < t.numel(); ++i) c += int64_t(t.getAsDouble(i)) != ignoreIndex;
    counted.push_back(c);
    total += c;
  }
  if (total == 0)
    return err("the step's targets are all the ignore index (" + llvm::Twine(ignoreIndex) + "): no token to train on");
  std::vector<float> w;
  for (int64_t c : counted) w.push_back(float(double(c) / double(total)));
  return w;
}

llvm::Expected<std::vector<double>> Trainer::forwardBackwardPass(const std::vector<std::pair<Tensor, Tensor>> &microBatches,
                                                                 const std::vector<float> &lossScales,
                                                                 std::vector<float> *grads, float lr, bool stepWhenSummed) {
  if (microBatches.size() != 1 || lossScales.size() != 1)
    return err("internal error: the direct path's pass carries one micro-batch, not " + llvm::Twine(microBatches.size()));
  auto loss = forwardBackward(microBatches[0].first, microBatches[0].second, lossScales[0], grads, lr);
  if (!loss) return loss.takeError();
  if (grads && stepWhenSummed) // the direct path: every parameter after the pass
    for (int p = 0; p < plan_.parameters_size(); ++p)
      updateParam(p, grads->data() + plan_.parameters(p).host_offset(), lr, 1.0f);
  return std::vector<double>{*loss};
}

llvm::Error Trainer::checkPassSize(size_t batches, bool backward, size_t lossScales) const {
  const size_t perPass = size_t(microBatchesPerPass());
  if (batches == 0 || batches > perPass || (backward && (batches != perPass || lossScales != perPass)))
    return err("a pass of the plan's schedule carries " + llvm::Twine(perPass) + " micro-batches, not " +
               llvm::Twine(batches));
  return llvm::Error::success();
}

bool Trainer::keepsGradients(size_t microBatches) const {
  return plan_.optimizer().clip() > 0 || microBatches > size_t(microBatchesPerPass());
}

bool Trainer::stepsInLastPass(size_t microBatches) const {
  if (plan_.optimizer().clip() > 0 || microBatches <= size_t(microBatchesPerPass())) return false;
  for (const plan::Unit &u : plan_.units())
    if (u.resident() || u.adamw_on_gpu()) return false;
  return true;
}

llvm::Expected<std::vector<double>> Trainer::evalLosses(const std::vector<std::pair<Tensor, Tensor>> &batches) {
  std::vector<double> out;
  for (const auto &b : batches) {
    auto l = evalLoss(b.first, b.second);
    if (!l) return l.takeError();
    out.push_back(*l);
  }
  return out;
}

llvm::Expected<double> Trainer::runPasses(const std::vector<std::pair<Tensor, Tensor>> &microBatches,
                                          const std::vector<float> &weights, std::vector<float> *grads, float lr,
                                          bool &stepped) {
  const size_t perPass = size_t(microBatchesPerPass()), gpus = size_t(plan::planGpus(plan_));
  stepped = false;
  if (microBatches.empty() || microBatches.size() % (perPass * gpus) != 0 || weights.size() != microBatches.size())
    return err("the step has " + llvm::Twine(microBatches.size()) + " micro-batches; the plan's passes carry " +
               llvm::Twine(perPass) + " each" +
               (gpus > 1 ? ", and its " + std::to_string(gpus) + " GPUs run as many passes each" : std::string()));
  // Several GPUs (runtime/train/GpuShares.h): GPU g's passes are the g-th
  // `share` micro-batches; each adds to `grads` as one GPU's passes do.
  const size_t share = microBatches.size() / gpus;
  auto which = [&](size_t g) { return "GPU " + std::to_string(g) + " of " + std::to_string(gpus); };
  const bool inLastPass = grads && stepsInLastPass(microBatches.size());
  // The rows every GPU's share of the step reads (runtime/plan/TokenRows.h).
  stepRows_ = earlyRowParams_.empty() ? nullptr : stepTokenRows(plan_, earlyRowParams_, microBatches);
  // A pass run outside a step (forwardBackwardPass called alone) finds none:
  // its early action steps nothing and its UPDATE the whole table.
  auto clearRows = llvm::make_scope_exit([this] { stepRows_.reset(); });
  double lossSum = 0;
  for (size_t first = 0; first < microBatches.size(); first += perPass) {
    const size_t g = first / share;
    // MEGAC_INJECT_GPU_FAULT: GPU g fails as its share starts, once.
    if (first % share == 0 && injectGpuFault_ && size_t(injectGpuFault_->gpu) == g && injectGpuFault_->step == state_.step) {
      injectGpuFault_.reset();
      return err(which(g) + ": injected fault at step " + llvm::Twine(state_.step) +
                 " (MEGAC_INJECT_GPU_FAULT); the step stopped before any update");
    }
    const std::vector<float> scales(weights.begin() + long(first), weights.begin() + long(first + perPass));
    const bool last = first + perPass == microBatches.size();
    if (grads && !(last && inLastPass) && std::all_of(scales.begin(), scales.end(), [](float w) { return w == 0; }))
      continue;
    const std::vector<std::pair<Tensor, Tensor>> pass(microBatches.begin() + long(first),
                                                      microBatches.begin() + long(first + perPass));
    auto losses = forwardBackwardPass(pass, scales, grads, lr, last && inLastPass);
    if (!losses) {
      if (gpus == 1) return losses.takeError();
      return llvm::handleErrors(losses.takeError(), [&](std::unique_ptr<llvm::StringError> e) -> llvm::Error {
        return err(which(g) + ": " + e->getMessage());
      });
    }
    stepped |= last && inLastPass;
    for (size_t k = 0; k < perPass; ++k) lossSum += double(scales[k]) * (*losses)[k];
  }
  return lossSum;
}

llvm::Expected<double> Trainer::forwardBackwardAsPass(const Tensor &tokens, const Tensor &targets, float lossScale,
                                                      std::vector<float> *grads, float lr) {
  if (microBatchesPerPass() != 1)
    return err("forwardBackward runs one micro-batch; the plan's passes carry " + llvm::Twine(microBatchesPerPass()) +
               " (forwardBackwardPass)");
  stepRows_ = earlyRowParams_.empty() ? nullptr : stepTokenRows(plan_, earlyRowParams_, {{tokens, targets}});
  auto losses = forwardBackwardPass({{tokens, targets}}, {lossScale}, grads, lr);
  stepRows_.reset();
  if (!losses) return losses.takeError();
  return losses->front();
}

llvm::Expected<std::vector<double>> Trainer::evalInPasses(const std::vector<std::pair<Tensor, Tensor>> &batches,
                                                          const ForwardPass &forwardPass) {
  const size_t perPass = size_t(microBatchesPerPass());
  std::vector<double> out;
  for (size_t first = 0; first < batches.size(); first += perPass) {
    const std::vector<std::pair<Tensor, Tensor>> pass(batches.begin() + long(first),
                                                      batches.begin() + long(std::min(batches.size(), first + perPass)));
    std::vector<double> losses;
    if (auto e = forwardPass(pass, losses)) return std::move(e);
    out.insert(out.end(), losses.begin(), losses.end());
  }
  return out;
}

llvm::Expected<StepStats> Trainer::step(const std::vector<std::pair<Tensor, Tensor>> &microBatches, float lr) {
  StepStats stats;
  const plan::Optimizer &o = plan_.optimizer();
  // Keep the step's gradients (4 bytes per parameter) for the global norm
  // or the remaining passes.
  const bool keepGrads = keepsGradients(microBatches.size());
  auto weights = microBatchWeights(microBatches, plan_.ignore_index());
  if (!weights) return weights.takeError();
  ++state_.step;
  std::vector<float> grads;
  if (keepGrads) grads.assign(size_t(hostElements_), 0.0f);
  bool stepped = false;
  auto loss = runPasses(microBatches, *weights, keepGrads ? &grads : nullptr, lr, stepped);
  if (!loss) {
    --state_.step;
    return loss.takeError();
  }
  stats.loss = *loss;
  if (!keepGrads || stepped) return stats;
  float gradScale = 1.0f;
  if (o.clip() > 0) {
    double sq = 0;
    for (const plan::Parameter &p : plan_.parameters())
      for (int64_t i = 0; i < p.numel(); ++i) {
        double g = grads[size_t(p.host_offset() + i)];
        sq += g * g;
      }
    stats.gradNorm = std::sqrt(sq);
    // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when above.
    double coef = double(o.clip()) / (stats.gradNorm + 1e-6);
    if (coef < 1.0) gradScale = float(coef);
  }
  syncHostState(/*callerWrites=*/true); // a backend's device copies (resident units) come back first
  for (int p = 0; p < plan_.parameters_size(); ++p)
    updateParam(p, grads.data() + plan_.parameters(p).host_offset(), lr, gradScale);
  return stats;
}

} // namespace megac::runtime
