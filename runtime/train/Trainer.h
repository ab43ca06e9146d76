#pragma once
// A backend's training step over a plan, and the host state every backend
// keeps: fp32 master weights and both AdamW moments in host arrays laid out
// by the plan's Parameter::host_offset. This class is also the direct CPU
// path, the reference the others are tested against: the units' forward
// programs in order, keeping each unit's input activations (checkpoints),
// then their backward programs in reverse (each recomputes its forward),
// with AdamW applied to each parameter as soon as its gradient is complete
// (or after the global norm / last micro-batch with --clip / --grad-accum).
// The CPU backend by default runs the plan's streaming schedule instead
// (runtime/stream/StreamExecutor.h); the CUDA runtime is runtime/cuda.
#include "runtime/ProgramRunner.h"
#include "runtime/plan/Bf16Weights.h"
#include "runtime/train/AdamW.h"
#include "runtime/train/GpuShares.h"
#include "runtime/train/NonFinite.h"
#include "runtime/train/TokenRowSets.h"

#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace megac::runtime {

struct HostState {
  std::vector<float> params, m, v;
  int64_t step = 0; // optimizer steps taken
};

struct StepStats {
  double loss = 0;      // mean over the step's micro-batches, before the update
  double gradNorm = -1; // global norm where computed (clipping), else -1
  // Busy seconds of the H2D, compute, D2H and CPU-optimizer lanes (GPU runs only; else -1).
  double laneBusy[4] = {-1, -1, -1, -1};
};

// The weight of each micro-batch in its step: the targets it counts (not the
// plan's ignore index) over all the step's counted targets, so that the
// step's loss and gradient are the mean over every counted token, however
// the micro-batches split them (each micro-batch's loss is already the mean
// over its own). Errors when the step counts no target at all.
llvm::Expected<std::vector<float>> microBatchWeights(const std::vector<std::pair<Tensor, Tensor>> &microBatches,
                                                     int64_t ignoreIndex);

// How the CPU backend runs a step.
struct CpuOptions {
  // Through the plan's streaming schedule as the GPU runs it: weight slots,
  // the arena and every region at the plan's offsets in a simulated device
  // allocation, each action on its stream under the schedule's events
  // (runtime/stream/StreamExecutor.h). false: the units' programs one after
  // the other on fresh tensors, the reference the executor is tested against.
  bool streamSchedule = true;
  uint64_t streamSeed = 0; // which legal interleaving of the streams runs
  bool checkReads = false; // check every read of the simulated memory against the write it expects
  // The defaults, changed by MEGAC_STREAM_SEED=N, MEGAC_CHECK_READS=1 and
  // MEGAC_CPU_DIRECT=1 where set (the test suites set MEGAC_CHECK_READS).
  static CpuOptions fromEnvironment();
};

// The CPU backend; the CUDA runtime (runtime/cuda/CudaTrainer.h) derives from
// it and keeps the host state and the optimizer's bookkeeping.
class Trainer {
public:
  // The CPU backend (defined in runtime/stream/StreamExecutor.cpp).
  static llvm::Expected<std::unique_ptr<Trainer>> create(const plan::Plan &plan,
                                                         const CpuOptions &opts = CpuOptions::fromEnvironment());
  virtual ~Trainer() = default;

  const plan::Plan &plan() const { return plan_; }
  // The host arrays, current: a backend that steps some state elsewhere (the
  // CUDA runtime's resident units) copies it back first, and takes the arrays
  // as possibly written by the caller before its next step.
  HostState &state() {
    syncHostState(/*callerWrites=*/true);
    bf16Stale_ = true;
    return state_;
  }
  // The same, to read only (a checkpoint): nothing goes back before the next step.
  const HostState &currentState() {
    syncHostState(/*callerWrites=*/false);
    return state_;
  }
  int64_t hostParamElements() const { return hostElements_; }

  // One optimizer step over `microBatches` (tokens, targets) pairs at `lr`.
  virtual llvm::Expected<StepStats> step(const std::vector<std::pair<Tensor, Tensor>> &microBatches, float lr);
  // The loss alone (no gradients, no update).
  virtual llvm::Expected<double> evalLoss(const Tensor &tokens, const Tensor &targets);
  // "cpu" or "cuda".
  virtual const char *device() const { return "cpu"; }
  // Whether a step runs the plan's streaming schedule (the CUDA runtime, the
  // CPU stream executor) rather than the units' programs directly.
  virtual bool runsSchedule() const { return false; }
  // The CPU backend computes in fp32 unless asked to emulate the plan's
  // compute mode (bf16 or tf32 operands in every matrix product, fp32
  // accumulation, as the GPU runs them): then CPU runs, CI's included, see
  // the GPU's rounding. The CUDA runtime ignores it.
  void emulatePlanCompute(bool on) { emulateCompute_ = on; }
  // What the backend computes in: "fp32", the plan's mode, or "<mode> operands, emulated".
  virtual std::string arithmetic() const;
  // Forward and backward of one micro-batch; gradients are added to `grads`
  // (host layout) when given, else each parameter is updated at once.
  virtual llvm::Expected<double> forwardBackward(const Tensor &tokens, const Tensor &targets, float lossScale,
                                                 std::vector<float> *grads, float lr);
  // Micro-batches one pass carries through every unit (the schedule's
  // micro_batches: layer-major accumulation); 1 on the direct path.
  virtual int microBatchesPerPass() const { return 1; }
  // One pass: forward and backward of each of `microBatches` (as many as
  // microBatchesPerPass()), micro-batch k's loss gradient seeded with
  // lossScales[k]; their summed gradients are added to `grads` when given,
  // else each parameter is updated at once. With `grads` and `stepWhenSummed`
  // (the step's last pass, no clip, no unit stepped on the GPU), each
  // parameter's AdamW runs from `grads` once the pass has added its last
  // contribution, beside the rest of the pass. Each micro-batch's loss.
  virtual llvm::Expected<std::vector<double>> forwardBackwardPass(const std::vector<std::pair<Tensor, Tensor>> &microBatches,
                                                                  const std::vector<float> &lossScales,
                                                                  std::vector<float> *grads, float lr,
                                                                  bool stepWhenSummed = false);
  // The loss of each of `batches` alone (no gradients, no update).
  virtual llvm::Expected<std::vector<double>> evalLosses(const std::vector<std::pair<Tensor, Tensor>> &batches);
  // Re-runs forward and backward of one micro-batch on the CPU backend with
  // every op's outputs checked (nothing is updated), and describes the first
  // op that gives NaN or +Inf: its unit, forward or backward, the op, and
  // whether it made the value from finite inputs (the arithmetic) or read it
  // from a weight. Empty when no op does.
  llvm::Expected<std::string> diagnoseNonFinite(const Tensor &tokens, const Tensor &targets);
  // What the backend measured over the run beyond the step log (the CUDA op profile); nothing by default.
  virtual void report(llvm::raw_ostream &) const {}
  // Each schedule action's (start, end), in seconds from the start of the
  // last micro-batch run with its backward, as this backend measured it
  // ((0, 0): it did not run); empty where the backend does not run the
  // schedule (`megac run --timeline`). With overlapping steps, it waits for
  // the last step's host AdamW to end first.
  virtual std::vector<std::pair<double, double>> lastActionTimes() { return {}; }

protected:
  explicit Trainer(const plan::Plan &p) : plan_(p) {}
  // Called by state() and currentState(): nothing on the CPU backend.
  virtual void syncHostState(bool /*callerWrites*/) {}
  // Sizes the host arrays and reads the optimizer settings and the loss.
  // `simulatedDeviceBytes`: host memory the backend takes beyond the host
  // state (the CPU stream executor's simulated GPU memory), checked with it.
  llvm::Error initHostState(int64_t simulatedDeviceBytes = 0);
  // `step`: AdamW's bias-correction step (-1: state_.step; a step whose host
  // AdamW runs on beside the next one passes its own).
  void updateParam(int32_t id, const float *grad, float lr, float gradScale, int64_t step = -1);
  // The same AdamW step on arrays of the parameter's elsewhere (a resident unit's copies).
  // `bf16`: the weights' bf16 copy, written beside them (updateParam passes the host's).
  void updateParamAt(int32_t id, float *param, const float *grad, float *m, float *v, float lr, float gradScale,
                     int64_t step = -1, uint16_t *bf16 = nullptr);
  // Token-indexed tables (runtime/train/TokenRowSets.h), on the host arrays:
  // AdamW of table `id` over the rows `read` lists, from `grad` (the whole
  // table's gradient); and UPDATE_UNREAD_ROWS, AdamW with a zero gradient
  // over the rows `rows` does not list of each of unit `unit`'s tables (none
  // without `rows`: a pass outside a step), on `threads` threads. Whether it
  // stepped any.
  void stepReadRows(int32_t id, const std::vector<RowRun> &read, const float *grad, float lr);
  // The AdamW segments of table `id`'s rows `runs` on the host arrays (its
  // bf16 copy too), from `grad` (the whole table's gradient; null: zero).
  void appendTableRows(std::vector<AdamWSegment> &segments, int32_t id, const std::vector<RowRun> &runs,
                       const float *grad);
  bool stepUnreadRows(int unit, const StepTokenRows *rows, float lr, int64_t step, int threads);
  // AdamW on parameter `id` from one unit's gradient: at once, or for a
  // parameter several units use (tied weights) summed in partial[id] until
  // the last of pending[id] contributions arrives.
  void updateOrAccumulate(int32_t id, const float *grad, float lr, std::vector<int> &pending,
                          std::vector<std::vector<float>> &partial);
  // Whether a step of `microBatches` micro-batches keeps its gradients on the
  // host until its end: for the global norm (clip), or over several passes.
  bool keepsGradients(size_t microBatches) const;
  // Whether such a step steps each parameter in its last pass
  // (forwardBackwardPass's stepWhenSummed): it keeps its gradients for later
  // passes, not for a clip, and no unit steps on the GPU.
  bool stepsInLastPass(size_t microBatches) const;
  // The step's passes of microBatchesPerPass() micro-batches through
  // forwardBackwardPass, micro-batch k's loss seeded with weights[k]; the
  // gradients into `grads` where the step keeps them (else each parameter
  // steps in its pass). The step's loss; `stepped`: the last pass stepped
  // every parameter (stepsInLastPass). A pass that counts no target is
  // skipped where the step keeps its gradients (not the last one that steps).
  // In a plan for several GPUs (runtime/train/GpuShares.h), GPU g's passes
  // are the g-th of as many shares: this backend runs them one after
  // another on its one device, each adding to the step's `grads` as it
  // lands, and names the GPU in an error.
  llvm::Expected<double> runPasses(const std::vector<std::pair<Tensor, Tensor>> &microBatches,
                                   const std::vector<float> &weights, std::vector<float> *grads, float lr, bool &stepped);
  // For the backends that run the schedule: one micro-batch as a pass of
  // one, and forward-only passes of up to microBatchesPerPass() batches
  // (`forwardPass` runs one, giving each batch's loss).
  llvm::Expected<double> forwardBackwardAsPass(const Tensor &tokens, const Tensor &targets, float lossScale,
                                               std::vector<float> *grads, float lr);
  // A pass's inputs: microBatchesPerPass() batches and loss scales, or for a
  // forward-only pass 1 to that many batches.
  llvm::Error checkPassSize(size_t batches, bool backward, size_t lossScales) const;
  using ForwardPass = std::function<llvm::Error(const std::vector<std::pair<Tensor, Tensor>> &, std::vector<double> &)>;
  llvm::Expected<std::vector<double>> evalInPasses(const std::vector<std::pair<Tensor, Tensor>> &batches,
                                                   const ForwardPass &forwardPass);
  // Tokens or targets converted to the dtype of the data activation, shape-checked.
  llvm::Expected<Tensor> dataTensor(const plan::Activation &a, const Tensor &src) const;

  // The templates' programs for the CPU kernels (forward, backward, and the
  // keep variants where a unit keeps its activations).
  llvm::Error preparePrograms();
  std::vector<PreparedProgram> forward_, backward_;
  std::map<size_t, PreparedProgram> forwardKeep_, backwardKept_; // by template, where present

  plan::Plan plan_;
  HostState state_;
  int64_t hostElements_ = 0;
  // Weights streamed as bf16 (runtime/plan/Bf16Weights.h): the host's bf16
  // copies, at bf16Layout_'s offsets. Every host AdamW step of such a
  // parameter writes its copy (updateParam, adamwUpdateSegments' bf16);
  // refreshBf16Weights rounds them all from the masters, which a step does
  // first where the caller may have written the masters (state(): loaded
  // weights, a resumed checkpoint).
  plan::Bf16WeightLayout bf16Layout_;
  std::vector<uint16_t> bf16Weights_;
  bool bf16Stale_ = true;
  uint16_t *bf16Of(int32_t param) {
    const int64_t off = bf16Layout_.empty() ? -1 : bf16Layout_.offsets[size_t(param)];
    return off < 0 ? nullptr : bf16Weights_.data() + off;
  }
  void refreshBf16Weights();
  int32_t lossId_ = -1; // the LOSS activation
  AdamWHyper hyper_;
  bool emulateCompute_ = false;
  std::optional<NanInjection> injectNan_; // MEGAC_INJECT_NAN (runtime/train/NonFinite.h)
  std::optional<GpuFaultInjection> injectGpuFault_; // MEGAC_INJECT_GPU_FAULT (runtime/train/GpuShares.h)
  // Token-indexed tables whose unread rows step early (the schedule's
  // UPDATE_UNREAD_ROWS), and the rows the tokens of the step being run read
  // (set by runPasses for the step's passes, null outside them; an UPDATE that
  // runs on beside the next step keeps its own).
  std::vector<int32_t> earlyRowParams_;
  std::shared_ptr<const StepTokenRows> stepRows_;

private:
  Tensor paramTensor(int32_t id) const;
  // `checkpoints`: each unit's activation inputs; `saved`: the saved values
  // of units that keep their activations (both null: a forward only).
  llvm::Expected<std::vector<Tensor>> runForward(const Tensor &tokens, const Tensor &targets,
                                                 std::vector<std::vector<Tensor>> *checkpoints,
                                                 std::vector<std::vector<Tensor>> *saved);

  // diagnoseNonFinite: the programs check every op; where the first NaN/+Inf was met.
  PreparedProgram::NonFiniteAt *check_ = nullptr;
  int32_t checkUnit_ = -1;
  bool checkBackward_ = false;
};

} // namespace megac::runtime
