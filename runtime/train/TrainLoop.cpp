#include "runtime/train/TrainLoop.h"

#include "runtime/plan/StreamLayout.h"

#include "runtime/train/Schedule.h"
#include "runtime/train/NonFinite.h"
#include "runtime/train/Weights.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <fstream>

namespace megac::runtime {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static std::string formatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, (int(s) % 3600) / 60);
  return buf;
}

static std::string jsonNumber(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

static llvm::Expected<TokenData> openData(const std::string &path, bool text, int64_t vocab) {
  return text ? TokenData::openText(path, vocab) : TokenData::openTokens(path, vocab);
}

// The micro-batches of one step: the fixed batch, or the next windows of the data.
static llvm::Error drawStep(const plan::Plan &plan, const TrainLoopOptions &opts, const TokenData *data,
                            uint64_t seed, int64_t &dataIndex, std::vector<std::pair<Tensor, Tensor>> &mbs,
                            int64_t *skipped) {
  const int64_t accum = plan::stepMicroBatches(plan); // every GPU's (runtime/train/GpuShares.h)
  mbs.clear();
  for (int64_t k = 0; k < accum; ++k) {
    if (opts.fixedTokens) {
      mbs.push_back({*opts.fixedTokens, *opts.fixedTargets});
      continue;
    }
    Tensor tok, tgt;
    if (auto e = data->batch(seed, dataIndex++, plan.batch(), plan.seq(), tok, tgt, plan.ignore_index(), skipped))
      return e;
    mbs.push_back({tok, tgt});
  }
  return llvm::Error::success();
}

// After a NaN/Inf in step `failed`: replays the run on the CPU backend from
// the last checkpoint (or the initial weights) to that step, and re-runs the
// step with every op checked, to name the op the value first appears in and
// where it came from.
static std::string diagnose(const plan::Plan &plan, const TrainLoopOptions &opts, const TokenData *data,
                            const std::string &fromCheckpoint, int64_t failed) {
  auto cpu = Trainer::create(plan);
  if (!cpu) return "no diagnosis: " + llvm::toString(cpu.takeError());
  CheckpointInfo start;
  start.seed = opts.seed;
  std::string origin;
  if (!fromCheckpoint.empty()) {
    auto ck = loadCheckpoint(fromCheckpoint, plan, (*cpu)->state());
    if (!ck) return "no diagnosis: " + llvm::toString(ck.takeError());
    start = *ck;
    origin = "the checkpoint " + fromCheckpoint + " (step " + std::to_string(start.step) + ")";
  } else {
    auto w = loadInitialWeights(plan, (*cpu)->state(), {opts.weights, opts.init, opts.initMissing, opts.seed}, opts.readers);
    if (!w) return "no diagnosis: " + llvm::toString(w.takeError());
    origin = opts.weights.empty() ? "the model's initial weights" : "the weights loaded from " + opts.weights;
  }
  llvm::outs() << "diagnosis: re-running step " << failed << " on the CPU backend, every op checked, from " << origin
               << "\n";
  llvm::outs().flush();
  std::vector<std::pair<Tensor, Tensor>> mbs;
  int64_t dataIndex = start.dataIndex;
  for (int64_t step = start.step + 1; step < failed; ++step) {
    if (auto e = drawStep(plan, opts, data, start.seed, dataIndex, mbs, nullptr))
      return "no diagnosis: " + llvm::toString(std::move(e));
    if (auto st = (*cpu)->step(mbs, learningRate(plan.optimizer(), step, opts.steps)); !st)
      return "step " + std::to_string(step) + " of the replay: " + llvm::toString(st.takeError());
  }
  if (auto e = drawStep(plan, opts, data, start.seed, dataIndex, mbs, nullptr))
    return "no diagnosis: " + llvm::toString(std::move(e));
  for (const auto &mb : mbs) {
    auto found = (*cpu)->diagnoseNonFinite(mb.first, mb.second);
    if (!found) return "no diagnosis: " + llvm::toString(found.takeError());
    if (found->empty()) continue;
    std::string d = *found;
    if (d.find("which holds it already: it came with the weights") != std::string::npos)
      d += start.step + 1 == failed ? " (" + origin + ")" : " (an update of steps " + std::to_string(start.step + 1) +
                                                               "-" + std::to_string(failed - 1) + ")";
    return d;
  }
  return "the CPU backend's re-run of step " + std::to_string(failed) +
         " gives no NaN or Inf: the value comes from the GPU's arithmetic (bf16 products overflow where fp32 does "
         "not; try --compute fp32, or run the step with --device cpu --emulate-compute)";
}

llvm::Expected<std::vector<double>> runTraining(Trainer &trainer, const TrainLoopOptions &opts) {
  const plan::Plan &plan = trainer.plan();
  const plan::Optimizer &o = plan.optimizer();
  const int64_t B = plan.batch(), S = plan.seq();
  const int gpus = plan::planGpus(plan);
  const int64_t accum = plan::stepMicroBatches(plan); // the step's micro-batches, every GPU's
  if (opts.steps <= 0) return err("--steps must be positive");

  std::optional<TokenData> data, val;
  if (!opts.fixedTokens) {
    if (opts.data.empty() && opts.text.empty()) return err("give training data: --data FILE, --text FILE, or --input/--targets");
    auto d = openData(opts.text.empty() ? opts.data : opts.text, !opts.text.empty(), plan.vocab());
    if (!d) return d.takeError();
    if (!opts.mask.empty())
      if (auto e = d->attachMask(opts.mask)) return std::move(e);
    if (d->size() < S + 1)
      return err(d->path() + ": " + llvm::Twine(d->size()) + " tokens is shorter than one window of seq+1 = " +
                 llvm::Twine(S + 1) + " tokens");
    data = std::move(*d);
  }
  if (!opts.valData.empty()) {
    auto v = openData(opts.valData, opts.valIsText, plan.vocab());
    if (!v) return v.takeError();
    if (!opts.valMask.empty())
      if (auto e = v->attachMask(opts.valMask)) return std::move(e);
    val = std::move(*v);
  }

  HostState &state = trainer.state();
  CheckpointInfo info;
  info.seed = opts.seed;
  info.totalSteps = opts.steps;
  info.microBatchesPerStep = accum;
  info.gpus = gpus;
  info.batch = B;
  info.optimizer = o;
  if (!opts.resume.empty()) {
    // A step past --steps is refused before the arrays are read.
    auto resumable = [&](const CheckpointInfo &c) -> llvm::Error {
      // Over another count of GPUs, the steps must stay the same size.
      const int64_t was = (c.batch > 0 ? c.batch : B) * c.microBatchesPerStep;
      if (c.gpus != gpus && was != B * accum)
        return err(opts.resume + ": the checkpoint's run took " + llvm::Twine(was) + " sequences a step on " +
                   llvm::Twine(c.gpus) + " GPU" + (c.gpus == 1 ? "" : "s") + "; this plan takes " +
                   llvm::Twine(B * accum) + " on " + llvm::Twine(gpus) +
                   " (--batch x --grad-accum x --gpus): recompile so that the step is the same size to resume on " +
                   "another count of GPUs");
      if (c.step <= opts.steps) return llvm::Error::success();
      return err(opts.resume + ": the checkpoint is at step " + llvm::Twine(c.step) + ", past --steps " +
                 llvm::Twine(opts.steps) + " (--steps counts from the start of the run: give more than " +
                 llvm::Twine(c.step) + " to train on from it)");
    };
    auto ck = loadCheckpoint(opts.resume, plan, state, resumable);
    if (!ck) return ck.takeError();
    info.step = ck->step;
    info.seed = ck->seed;
    info.dataIndex = ck->dataIndex;
    info.weightsSource = ck->weightsSource;
    info.weightNames = ck->weightNames;
    if (!opts.quiet)
      llvm::outs() << "resumed from " << opts.resume << " at step " << ck->step << " of " << opts.steps << "\n";
    if (ck->step == opts.steps) {
      llvm::outs() << "nothing to do: the checkpoint is at step " << ck->step << ", --steps is " << opts.steps << "\n";
      return std::vector<double>{};
    }
  } else {
    auto loaded = loadInitialWeights(plan, state, {opts.weights, opts.init, opts.initMissing, opts.seed}, opts.readers);
    if (!loaded) return loaded.takeError();
    if (!opts.quiet)
      for (const std::string &line : loaded->report) llvm::outs() << line << "\n";
    info.weightsSource = loaded->source;
    info.weightNames = loaded->names;
  }

  std::unique_ptr<std::ofstream> log;
  if (!opts.logPath.empty()) {
    log = std::make_unique<std::ofstream>(opts.logPath, opts.resume.empty() ? std::ios::trunc : std::ios::app);
    if (!*log) return err(opts.logPath + ": cannot open for writing");
  }
  if (!opts.quiet) {
    llvm::outs() << "training " << plan.total_parameters() << " parameters on " << trainer.device() << " ("
                 << trainer.arithmetic() << "), batch " << B << " x seq "
                 << S;
    if (gpus > 1)
      llvm::outs() << " x " << accum / gpus << " micro-batch" << (accum / gpus == 1 ? "" : "es") << " on each of " << gpus
                   << " GPUs (their shares one after another on this " << trainer.device()
                   << " backend, the host summing their gradients)";
    else if (accum > 1)
      llvm::outs() << " x " << accum << " micro-batches";
    llvm::outs() << ", " << opts.steps << " steps";
    if (data) llvm::outs() << "; data " << data->describe();
    llvm::outs() << "\n";
  }

  std::vector<double> losses;
  std::string lastCheckpoint = opts.resume; // where a replay of the run starts (empty: the initial weights)
  // Where a NaN/Inf first appears: the CPU backend replays the step with every op checked.
  auto nonFiniteHint = [&](int64_t step) {
    if (trainer.device() == std::string("cpu")) return diagnose(plan, opts, data ? &*data : nullptr, lastCheckpoint, step);
    return std::string("to find the op, replay this step on the CPU backend: megac run with the same flags and "
                       "--device cpu") +
           (lastCheckpoint.empty() ? std::string() : " --resume " + lastCheckpoint);
  };
  auto t0 = std::chrono::steady_clock::now();
  int64_t firstStep = info.step;
  for (int64_t step = info.step + 1; step <= opts.steps; ++step) {
    std::vector<std::pair<Tensor, Tensor>> mbs;
    int64_t skipped = 0; // masked windows without a counted target, drawn again
    if (auto e = drawStep(plan, opts, data ? &*data : nullptr, info.seed, info.dataIndex, mbs, &skipped))
      return std::move(e);
    float lr = learningRate(o, step, opts.steps);
    auto stepStart = std::chrono::steady_clock::now();
    auto stats = trainer.step(mbs, lr);
    double stepSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stepStart).count();
    if (!stats) {
      std::string why;
      bool nonFinite = false;
      llvm::handleAllErrors(stats.takeError(), [&](const NonFiniteError &e) { why = e.message(), nonFinite = true; },
                            [&](const llvm::ErrorInfoBase &e) { why = e.message(); });
      if (nonFinite) {
        llvm::outs() << "step " << step << ": " << why << "\n";
        return err("step " + llvm::Twine(step) + ": NaN or Inf; " + nonFiniteHint(step));
      }
      return err("step " + llvm::Twine(step) + ": " + why);
    }
    if (!std::isfinite(stats->loss)) { // with --no-finite-check, found only here: the update has been applied
      llvm::outs() << "step " << step << ": the loss is " << std::to_string(stats->loss) << "\n";
      return err("step " + llvm::Twine(step) + ": NaN or Inf; " + nonFiniteHint(step));
    }
    losses.push_back(stats->loss);
    info.step = step;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double perStep = elapsed / double(step - firstStep);
    double tokensPerS = double(B * S * accum) / std::max(perStep, 1e-9);
    double eta = perStep * double(opts.steps - step);
    if (!opts.quiet) {
      llvm::outs() << llvm::format("step %6lld/%lld  loss %.4f  lr %.3e  %8.0f tok/s  elapsed %s  eta %s",
                                   (long long)step, (long long)opts.steps, stats->loss, lr, tokensPerS,
                                   formatDuration(elapsed).c_str(), formatDuration(eta).c_str());
      if (stats->gradNorm >= 0) llvm::outs() << llvm::format("  grad_norm %.3f", stats->gradNorm);
      if (skipped) llvm::outs() << "  skipped " << skipped << " window" << (skipped == 1 ? "" : "s") << " (no counted target)";
      if (stats->laneBusy[0] >= 0)
        llvm::outs() << llvm::format("  step %.3fs  busy s: h2d %.3f compute %.3f d2h %.3f cpu %.3f", stepSeconds, stats->laneBusy[0],
                                     stats->laneBusy[1], stats->laneBusy[2], stats->laneBusy[3]);
      llvm::outs() << "\n";
      llvm::outs().flush();
    }
    if (log) {
      *log << "{\"step\": " << step << ", \"loss\": " << jsonNumber(stats->loss) << ", \"lr\": " << jsonNumber(lr)
           << ", \"tokens_per_s\": " << jsonNumber(tokensPerS) << ", \"elapsed_s\": " << jsonNumber(elapsed);
      if (stats->gradNorm >= 0) *log << ", \"grad_norm\": " << jsonNumber(stats->gradNorm);
      if (skipped) *log << ", \"skipped_windows\": " << skipped;
      if (stats->laneBusy[0] >= 0) {
        *log << ", \"step_s\": " << jsonNumber(stepSeconds);
        const char *lanes[4] = {"h2d_busy_s", "compute_busy_s", "d2h_busy_s", "cpu_busy_s"};
        for (int k = 0; k < 4; ++k) *log << ", \"" << lanes[k] << "\": " << jsonNumber(stats->laneBusy[k]);
      }
      *log << "}\n";
      log->flush();
    }
    if (val && opts.evalEvery > 0 && (step % opts.evalEvery == 0 || step == opts.steps)) {
      // The mean over every counted target of the held-out batches, as a step's loss is.
      std::vector<std::pair<Tensor, Tensor>> batches(size_t(opts.evalBatches));
      for (int64_t k = 0; k < opts.evalBatches; ++k)
        if (auto e = val->batch(info.seed ^ 0x5EED, k, B, S, batches[size_t(k)].first, batches[size_t(k)].second,
                                plan.ignore_index()))
          return std::move(e);
      auto weights = microBatchWeights(batches, plan.ignore_index());
      if (!weights) return weights.takeError();
      auto losses = trainer.evalLosses(batches);
      if (!losses) return losses.takeError();
      double vl = 0;
      for (size_t k = 0; k < batches.size(); ++k)
        if ((*weights)[k] != 0) vl += double((*weights)[k]) * (*losses)[k];
      if (!opts.quiet) llvm::outs() << llvm::format("step %6lld  val_loss %.4f\n", (long long)step, vl);
      if (log) *log << "{\"step\": " << step << ", \"val_loss\": " << jsonNumber(vl) << "}\n";
    }
    bool last = step == opts.steps;
    if (!opts.checkpointDir.empty() && ((opts.checkpointEvery > 0 && step % opts.checkpointEvery == 0) || last)) {
      if (auto e = saveCheckpoint(opts.checkpointDir, plan, trainer.currentState(), info)) return std::move(e);
      lastCheckpoint = opts.checkpointDir;
      if (!opts.quiet) llvm::outs() << "checkpoint: " << opts.checkpointDir << " at step " << step << "\n";
    }
  }
  return losses;
}

} // namespace megac::runtime
