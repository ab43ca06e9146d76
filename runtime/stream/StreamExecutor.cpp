#include "runtime/stream/StreamExecutor.h"

#include "runtime/core/DType.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/StreamLayout.h"
#include "runtime/plan/UnitPrograms.h"
#include "runtime/stream/ShadowMemory.h"
#include "runtime/stream/StreamSimulator.h"
#include "runtime/train/NonFinite.h"
#include "runtime/train/PlanCompute.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

namespace megac::stream {

using runtime::PreparedProgram;

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

namespace {

// Which write last filled a slot or region, this micro-batch or before.
struct Fill {
  int64_t pass = -1;  // the micro-batch (a counter over the run); -1: never
  int64_t stamp = -1; // its ShadowMemory stamp
  int unit = -1;      // whose weights / gradients (slots)
  int action = -1;    // the action that wrote it; -1: the runtime before the first action
};

class StreamExecutor : public runtime::Trainer {
public:
  StreamExecutor(const plan::Plan &p, const runtime::CpuOptions &o) : Trainer(p), opts_(o) {}
  ~StreamExecutor() override {
    if (dev_) munmap(dev_, devBytes_);
  }

  llvm::Error init();
  llvm::Expected<double> forwardBackward(const Tensor &tokens, const Tensor &targets, float lossScale,
                                         std::vector<float> *grads, float lr) override;
  llvm::Expected<double> evalLoss(const Tensor &tokens, const Tensor &targets) override;
  int microBatchesPerPass() const override { return M_; }
  llvm::Expected<std::vector<double>> forwardBackwardPass(const std::vector<std::pair<Tensor, Tensor>> &microBatches,
                                                          const std::vector<float> &lossScales,
                                                          std::vector<float> *grads, float lr,
                                                          bool stepWhenSummed = false) override;
  llvm::Expected<std::vector<double>> evalLosses(const std::vector<std::pair<Tensor, Tensor>> &batches) override;
  bool runsSchedule() const override { return true; }
  // Host times of the simulated interleaving: one action at a time, in the order the seed chose.
  std::vector<std::pair<double, double>> lastActionTimes() override {
    if (auto e = drainCarried()) llvm::consumeError(std::move(e)); // a later step reports it
    return lastTimes_;
  }

protected:
  void syncHostState(bool callerWrites) override;

private:
  class ArenaShadow;

  // One pass of the schedule's micro-batches (a forward-only pass may be
  // given fewer: the rest repeat the last one's data, their losses dropped).
  llvm::Error runPass(const std::vector<std::pair<Tensor, Tensor>> &microBatches, bool backward,
                      const std::vector<float> &lossScales, std::vector<float> *grads, float lr,
                      std::vector<double> &losses, bool stepWhenSummed = false);
  llvm::Error execute(int i);
  // Action i of the pass `tag` (this one, or an earlier step's UPDATE left
  // over when steps overlap), with that pass's learning rate, step and books.
  llvm::Error executeIn(int i, int64_t tag);
  // Runs the host AdamW that earlier steps left running (overlapping steps).
  llvm::Error drainCarried();
  // Forgets the passes whose actions have all run (the last backward one's times kept).
  void retirePasses();
  llvm::Error prefetch(int i, const plan::StreamAction &a);
  llvm::Error compute(int i, const plan::StreamAction &a);
  llvm::Error offload(int i, const plan::StreamAction &a);
  llvm::Error expectWholeSum(int i, int gradSlot) const;
  llvm::Error update(int i, const plan::StreamAction &a);
  llvm::Error updateUnreadRows(int i, const plan::StreamAction &a);
  // Whether the running pass steps its parameters (not an earlier pass of a
  // step that keeps its gradients), and the rows its step's tokens read of
  // `param` where that table's unread rows stepped early (else null).
  bool passSteps() const { return !grads_ || stepWhenSummed_; }
  const std::vector<runtime::RowRun> *earlyRows(int32_t param) const {
    return passSteps() && rows_ ? rows_->readOf(param) : nullptr;
  }
  // A unit's weights and moments in the simulated device memory, each in its slot layout.
  struct DeviceAdamw {
    uint8_t *weights, *m, *v;
  };
  llvm::Error updateFrom(int unit, const uint8_t *gradBase, bool poisoned, const DeviceAdamw *dev);
  // An adamw_on_gpu unit's moments in and, after its UPDATE, all three back out.
  llvm::Error checkMomentAction(int i, const plan::StreamAction &a) const;
  llvm::Error fetchMoments(int i, const plan::StreamAction &a);
  llvm::Error writeback(int i, const plan::StreamAction &a);
  // An offloaded checkpoint out to the host's copy, and back into its LOADED_CHECKPOINT region.
  llvm::Error saveCheckpoint(int i, const plan::StreamAction &a);
  llvm::Error loadCheckpoint(int i, const plan::StreamAction &a);
  bool onGpu(int u) const { return plan::adamwOnGpu(plan_.units(u)); }

  std::string actionText(int i) const;
  llvm::Expected<uint8_t *> region(plan::DeviceRegion::Kind kind, int index, int64_t atLeast, int64_t *offset = nullptr,
                                   int microBatch = 0);
  // Index of (activation or unit, micro-batch) in the per-micro-batch books.
  size_t at(int index, int microBatch) const { return size_t(index) * size_t(M_) + size_t(microBatch); }
  Fill fill(int action, int unit, int64_t offset, int64_t bytes, ShadowMemory &sh, const std::string &what);
  llvm::Error expect(int i, const Fill &f, const std::string &what, int wantUnit, int64_t offset, int64_t bytes,
                     const ShadowMemory &sh);
  void copyResident(bool toDevice);
  // One host array's slice of unit u (its parameters at their host offsets)
  // to or from `dev`, where the unit's slot layout starts.
  void copyUnit(int u, std::vector<float> &host, uint8_t *dev, bool toDevice);
  // A PREFETCH's weights that stream as bf16 (runtime/plan/Bf16Weights.h), into unit u's slot.
  llvm::Error streamBf16(int i, int u, uint8_t *slot);
  // An activation's bytes: its DATA or CHECKPOINT region, the fill that
  // wrote it; for a BACKWARD (`backward`) an offloaded checkpoint's
  // LOADED_CHECKPOINT region.
  llvm::Expected<Tensor> activationView(int i, int32_t act, int microBatch, bool checkFilled, bool backward = false);
  Tensor viewOf(uint8_t *at, const plan::TensorType &t) const {
    return Tensor::view(DType(int(t.dtype())), Shape(t.shape().begin(), t.shape().end()), at);
  }
  bool gradFlows(int unit, int inputPos) const {
    const plan::Template &t = plan_.templates(plan_.units(unit).template_id());
    return inputPos < t.input_has_gradient_size() && t.input_has_gradient(inputPos);
  }

  runtime::CpuOptions opts_;
  const plan::StreamSchedule *s_ = nullptr;
  uint8_t *dev_ = nullptr;
  size_t devBytes_ = 0;
  std::vector<uint8_t> staging_;
  std::map<std::tuple<int, int, int>, const plan::DeviceRegion *> regions_; // (kind, index, micro-batch)
  int M_ = 1;                                                               // micro-batches per pass
  std::vector<plan::WeightLayout> layouts_;
  std::vector<plan::SavedLayout> savedLayouts_; // per template
  std::vector<int> producer_;                   // activation -> unit, -1 for data
  std::vector<std::vector<std::pair<int, int>>> users_;
  bool anyResident_ = false, hostNewer_ = true, deviceNewer_ = false;

  ShadowMemory shadow_, stagingShadow_, checkpointShadow_;
  int64_t nextStamp_ = 0, pass_ = 0;
  std::vector<Fill> weightSlot_, gradSlot_, stagingSlot_, resident_, momentSlot_;
  std::vector<Fill> activation_, activationGrad_, saved_; // per (activation or unit, micro-batch): at()
  // Checkpoint offload: the pinned host copies (at the actions' host
  // offsets), the checkpoints brought back, and per (activation,
  // micro-batch) what last wrote its host copy and its LOADED_CHECKPOINT region.
  std::vector<uint8_t> hostCheckpoints_;
  std::set<std::pair<int, int>> loadedCheckpoints_;
  std::vector<Fill> hostCopy_, loaded_;

  // Each pass (micro-batch) whose actions have not all run: with
  // overlapping steps, a step's CPU UPDATEs run on into the next passes.
  struct PassContext {
    bool backward = false;
    float lr = 0;
    int64_t step = 0;
    std::vector<float> *grads = nullptr;
    bool stepWhenSummed = false; // the step's last pass: each parameter steps from `grads` once summed
    std::shared_ptr<const runtime::StepTokenRows> rows; // the step's token rows (UPDATE_UNREAD_ROWS)
    std::vector<bool> updated;   // per unit: its AdamW ran
    std::vector<bool> updateRan; // per unit: its CPU UPDATE ran (poisoned or not)
    std::vector<std::string> unreadRowsStepped; // units whose UPDATE_UNREAD_ROWS stepped rows
    std::vector<std::pair<double, double>> times; // seconds from `start`
    std::chrono::steady_clock::time_point start;
  };
  std::map<int64_t, PassContext> passes_;
  std::unique_ptr<StreamSimulation> sim_;

  // This micro-batch.
  bool backwardPass_ = false;
  std::vector<float> lossScales_; // per micro-batch of the pass
  float lr_ = 0;
  std::vector<float> *grads_ = nullptr;
  std::vector<double> losses_;
  std::vector<int> pending_;
  std::vector<std::vector<float>> partial_;
  bool stepWhenSummed_ = false;
  std::shared_ptr<const runtime::StepTokenRows> rows_; // of the pass whose action runs
  std::vector<int> sumPending_; // per parameter: contributions still to come this pass (stepWhenSummed_)
  // The NaN/Inf check of each unit's gradients, right after its BACKWARD, as
  // the GPU runtime does it (runtime/cuda/FiniteCheckKernels.h): the first
  // bad unit in backward order, and the verdict that travels with each grad
  // and staging slot (any bad unit so far). A poisoned UPDATE skips its AdamW;
  // the pass ends, then fails naming the unit.
  bool poison_ = false;
  std::string firstBad_;
  std::vector<bool> slotVerdict_, stagingVerdict_;
  std::vector<int> bwdPos_;     // unit -> position of its BACKWARD in the schedule
  std::vector<std::pair<double, double>> lastTimes_; // each action's host time in the last backward pass
  std::vector<bool> *updated_ = nullptr; // per unit: its AdamW ran in the pass of the action running
};

std::string StreamExecutor::actionText(int i) const {
  const plan::StreamAction &a = s_->actions(i);
  std::string t = "action " + std::to_string(i) + " (" + plan::actionKindName(a.kind()) + " of '" +
                  plan_.units(a.unit()).name() + "'";
  if (plan::isCheckpointCopy(a.kind()) && a.activation() >= 0 && a.activation() < plan_.activations_size())
    t += ", '" + plan_.activations(a.activation()).name() + "'";
  if (M_ > 1 && (a.kind() == plan::StreamAction::FORWARD || a.kind() == plan::StreamAction::BACKWARD ||
                 plan::isCheckpointCopy(a.kind())))
    t += ", micro-batch " + std::to_string(a.micro_batch());
  if (a.weight_slot() >= 0) t += ", weight slot " + std::to_string(a.weight_slot());
  if (a.grad_slot() >= 0) t += ", grad slot " + std::to_string(a.grad_slot());
  return t + ")";
}

llvm::Error StreamExecutor::init() {
  if (auto e = preparePrograms()) return e;
  if (!plan_.has_schedule() || plan_.schedule().actions_size() == 0)
    return err("the plan has no streaming schedule (compiled by an older megac?): recompile it with megac compile");
  s_ = &plan_.schedule();
  const plan::StreamSchedule &s = *s_;
  // The schedule's own sizes before anything reads them (the host-memory check's report included).
  if (s.weight_slots() < 1 || s.grad_slots() < 1 || s.device_bytes() < 0 || s.grad_slot_bytes() < 0 ||
      s.small_grad_slots() < 0 || s.small_grad_slots() >= s.grad_slots() || s.small_grad_slot_bytes() < 0)
    return err("the plan's schedule has no slots or a negative size");
  if (s.weight_slots() > s.regions_size() || s.grad_slots() > s.regions_size()) // each slot is a region
    return err("the plan's schedule has " + llvm::Twine(s.weight_slots()) + " weight and " + llvm::Twine(s.grad_slots()) +
               " grad slots but " + llvm::Twine(s.regions_size()) + " regions");
  for (const plan::DeviceRegion &r : s.regions())
    if (!plan::blockWithin(r.offset(), r.bytes(), s.device_bytes()) || r.offset() % plan::kAlignment != 0)
      return err("the plan's " + plan::DeviceRegion::Kind_Name(r.kind()) + " region " + llvm::Twine(r.index()) +
                 " is not a 256-aligned block inside its device allocation");
  for (const plan::StreamAction &a : s.actions())
    if (a.unit() < 0 || a.unit() >= plan_.units_size())
      return err("the plan's schedule names unit " + llvm::Twine(a.unit()) + ", which does not exist");
  // The simulated GPU memory is billed beside the host state: pages are taken only where
  // regions are touched, but resident units' copies and the activations may touch most of it.
  if (auto e = initHostState(s.device_bytes())) return e;
  // The simulated device allocation: pages are taken only where regions are touched.
  devBytes_ = size_t(std::max<int64_t>(s.device_bytes(), 256));
  void *m = mmap(nullptr, devBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED)
    return err("cannot map the " + llvm::Twine(int64_t(devBytes_)) + " bytes the plan's device allocation takes");
  dev_ = static_cast<uint8_t *>(m);
  if (auto e = plan::checkPassMicroBatches(s)) return e;
  M_ = plan::passMicroBatches(s);
  for (const plan::DeviceRegion &r : s.regions()) regions_[{int(r.kind()), r.index(), r.micro_batch()}] = &r;
  for (int u = 0; u < plan_.units_size(); ++u) {
    for (int32_t id : plan_.units(u).parameters())
      if (id < 0 || id >= plan_.parameters_size())
        return err("unit '" + plan_.units(u).name() + "' binds parameter " + llvm::Twine(id) + ", which does not exist");
    layouts_.push_back(plan::unitWeightLayout(plan_, u));
    if (plan_.units(u).resident()) {
      if (!plan::canBeResident(plan_, u))
        return err("unit '" + plan_.units(u).name() + "' is resident, but it shares a parameter with another unit or has none");
      anyResident_ = true;
    }
    if (onGpu(u) && !plan::canBeResident(plan_, u))
      return err("unit '" + plan_.units(u).name() + "' runs its AdamW on the GPU, but it shares a parameter with another unit or has none");
  }
  for (const plan::Template &t : plan_.templates()) savedLayouts_.push_back(plan::hasKeepPrograms(t) ? plan::savedLayout(t) : plan::SavedLayout{});
  const int A = plan_.activations_size();
  producer_.assign(size_t(A), -1);
  users_.assign(size_t(A), {});
  for (int u = 0; u < plan_.units_size(); ++u) {
    for (int32_t a : plan_.units(u).activation_outputs()) {
      if (a < 0 || a >= A) return err("unit '" + plan_.units(u).name() + "' writes an activation that does not exist");
      producer_[size_t(a)] = u;
    }
    for (int k = 0; k < plan_.units(u).activation_inputs_size(); ++k) {
      int32_t a = plan_.units(u).activation_inputs(k);
      if (a < 0 || a >= A) return err("unit '" + plan_.units(u).name() + "' reads an activation that does not exist");
      users_[size_t(a)].push_back({u, k});
    }
  }
  try {
    staging_.assign(size_t(plan::stagingOffset(s, s.grad_slots())), 0);
  } catch (const std::bad_alloc &) {
    return err("cannot allocate the " + llvm::Twine(plan::stagingOffset(s, s.grad_slots())) +
               " bytes of the plan's host staging slots");
  }
  bwdPos_.assign(size_t(plan_.units_size()), -1);
  for (int i = 0; i < s.actions_size(); ++i)
    if (s.actions(i).kind() == plan::StreamAction::BACKWARD) bwdPos_[size_t(s.actions(i).unit())] = i;
  slotVerdict_.assign(size_t(s.grad_slots()), false);
  stagingVerdict_ = slotVerdict_;
  weightSlot_.assign(size_t(s.weight_slots()), {});
  momentSlot_ = weightSlot_;
  gradSlot_.assign(size_t(s.grad_slots()), {});
  stagingSlot_ = gradSlot_;
  activation_.assign(size_t(A) * size_t(M_), {});
  activationGrad_ = activation_;
  saved_.assign(size_t(plan_.units_size()) * size_t(M_), {});
  hostCopy_ = loaded_ = activation_;
  loadedCheckpoints_ = plan::loadedCheckpoints(s);
  if (auto e = plan::checkCheckpointCopies(plan_)) return e; // micro-batches: checkPassMicroBatches above
  try {
    hostCheckpoints_.assign(size_t(std::max<int64_t>(s.pinned_checkpoint_bytes(), 0)), 0);
  } catch (const std::bad_alloc &) {
    return err("cannot allocate the " + llvm::Twine(s.pinned_checkpoint_bytes()) + " bytes of the plan's offloaded checkpoints");
  }
  resident_.assign(size_t(plan_.units_size()), {});
  sim_ = std::make_unique<StreamSimulation>(s);
  return llvm::Error::success();
}

llvm::Expected<uint8_t *> StreamExecutor::region(plan::DeviceRegion::Kind kind, int index, int64_t atLeast,
                                                 int64_t *offset, int microBatch) {
  auto it = regions_.find({int(kind), index, microBatch});
  if (it == regions_.end())
    return err("the plan's device layout has no " + plan::DeviceRegion::Kind_Name(kind) + " region " + llvm::Twine(index) +
               (microBatch ? " of micro-batch " + llvm::Twine(microBatch) : llvm::Twine()));
  if (it->second->bytes() < atLeast)
    return err("the plan's " + plan::DeviceRegion::Kind_Name(kind) + " region " + llvm::Twine(index) + " holds " +
               llvm::Twine(it->second->bytes()) + " bytes; it needs " + llvm::Twine(atLeast));
  if (offset) *offset = it->second->offset();
  return dev_ + it->second->offset();
}

Fill StreamExecutor::fill(int action, int unit, int64_t offset, int64_t bytes, ShadowMemory &sh, const std::string &what) {
  Fill f{pass_, nextStamp_++, unit, action};
  if (opts_.checkReads)
    sh.write(offset, bytes, {f.stamp, what + " written by " + (action >= 0 ? actionText(action) : std::string("the runtime"))});
  return f;
}

llvm::Error StreamExecutor::expect(int i, const Fill &f, const std::string &what, int wantUnit, int64_t offset,
                                   int64_t bytes, const ShadowMemory &sh) {
  auto by = [&](int action) { return action >= 0 ? actionText(action) : std::string("the runtime"); };
  if (f.pass != pass_)
    return err("schedule: " + actionText(i) + " reads " + what + " before anything filled it this pass" +
               (f.pass >= 0 ? " (it holds what " + by(f.action) + " wrote before)" : std::string()));
  if (wantUnit >= 0 && f.unit != wantUnit)
    return err("schedule: " + actionText(i) + " reads " + what + ", which holds " +
               (f.unit >= 0 ? "unit '" + plan_.units(f.unit).name() + "''s" : std::string("no unit's")) +
               ", written by " + by(f.action));
  if (opts_.checkReads) {
    std::string bad = sh.check(offset, bytes, f.stamp);
    if (!bad.empty())
      return err("schedule: " + actionText(i) + " reads " + what + " (filled by " + by(f.action) + "), but its " + bad);
  }
  return llvm::Error::success();
}

// The arena of one program run: the observer stamps what each op writes and
// checks what it reads (CpuOptions::checkReads).
class StreamExecutor::ArenaShadow : public PreparedProgram::ArenaObserver {
public:
  ArenaShadow(StreamExecutor &x, int action, int64_t base, size_t values, const std::string &program)
      : x_(x), action_(action), base_(base), stamps_(values, -1), program_(program) {}
  llvm::Error read(int64_t offset, int64_t bytes, int32_t tag, const std::string &value, const std::string &op) override {
    int64_t want = tag >= 0 && size_t(tag) < stamps_.size() ? stamps_[size_t(tag)] : -1;
    std::string bad = x_.shadow_.check(base_ + offset, bytes, want);
    if (bad.empty()) return llvm::Error::success();
    return err("schedule: " + x_.actionText(action_) + ": " + program_ + " op '" + op + "' reads '" + value +
               "' in the arena, but its " + bad);
  }
  void write(int64_t offset, int64_t bytes, int32_t tag) override {
    int64_t st = x_.nextStamp_++;
    if (tag >= 0 && size_t(tag) < stamps_.size()) stamps_[size_t(tag)] = st;
    x_.shadow_.write(base_ + offset, bytes,
                     {st, "an arena value (#" + std::to_string(tag) + ") of " + program_ + " in " + x_.actionText(action_)});
  }

private:
  StreamExecutor &x_;
  int action_;
  int64_t base_;
  std::vector<int64_t> stamps_;
  std::string program_;
};

void StreamExecutor::copyUnit(int u, std::vector<float> &host, uint8_t *dev, bool toDevice) {
  const plan::Unit &unit = plan_.units(u);
  for (int k = 0; k < unit.parameters_size(); ++k) {
    const plan::Parameter &p = plan_.parameters(unit.parameters(k));
    uint8_t *d = dev + layouts_[size_t(u)].offsets[size_t(k)];
    float *h = host.data() + p.host_offset();
    if (toDevice) std::memcpy(d, h, size_t(p.numel()) * 4);
    else std::memcpy(h, d, size_t(p.numel()) * 4);
  }
}

// The weights that stream as bf16 arrive as their host bf16 copies, which
// must be the masters' rounding (each host AdamW step of theirs wrote it);
// the GPU unpacks them into the fp32 slot, as here.
llvm::Error StreamExecutor::streamBf16(int i, int u, uint8_t *slot) {
  const plan::Unit &unit = plan_.units(u);
  for (int k = 0; k < unit.parameters_size(); ++k) {
    const int32_t id = unit.parameters(k);
    const uint16_t *b = bf16Of(id);
    if (!b) continue;
    const plan::Parameter &p = plan_.parameters(id);
    const float *master = state_.params.data() + p.host_offset();
    auto *d = reinterpret_cast<float *>(slot + layouts_[size_t(u)].offsets[size_t(k)]);
    for (int64_t e = 0; e < p.numel(); ++e) {
      if (b[e] != floatToBf16(master[e]) && !(std::isnan(master[e]) && std::isnan(bf16ToFloat(b[e]))))
        return err("schedule: " + actionText(i) + " streams parameter '" + p.name() + "' as bf16, and its host bf16 copy " +
                   "is not its master's rounding (element " + llvm::Twine(e) + "): a step of it did not write the copy");
      d[e] = bf16ToFloat(b[e]);
    }
  }
  return llvm::Error::success();
}

void StreamExecutor::copyResident(bool toDevice) {
  for (int u = 0; u < plan_.units_size(); ++u) {
    if (!plan_.units(u).resident()) continue;
    const plan::Unit &unit = plan_.units(u);
    const plan::ResidentLayout rl = plan::residentLayout(plan_, u);
    int64_t off = 0;
    auto base = region(plan::DeviceRegion::RESIDENT, u, rl.bytes, &off);
    if (!base) { // init's plan and the checker make this unreachable; say it rather than write anywhere
      llvm::report_fatal_error(llvm::Twine("megac: ") + llvm::toString(base.takeError()), false);
    }
    for (auto [at, host] : {std::pair<int64_t, std::vector<float> *>{rl.weights, &state_.params},
                            {rl.m, &state_.m},
                            {rl.v, &state_.v}})
      copyUnit(u, *host, *base + at, toDevice);
    if (toDevice) {
      resident_[size_t(u)] = fill(-1, u, off, rl.bytes, shadow_, "the weights and moments of resident unit '" + unit.name() + "'");
      resident_[size_t(u)].pass = -2; // valid in every micro-batch until an UPDATE rewrites it
    }
  }
}

void StreamExecutor::syncHostState(bool callerWrites) {
  // The host arrays are final once the last step's AdamW has run.
  if (auto e = drainCarried())
    llvm::report_fatal_error(llvm::Twine("megac: the last step's host AdamW: ") + llvm::toString(std::move(e)), false);
  if (!anyResident_) return;
  if (deviceNewer_) {
    copyResident(false);
    deviceNewer_ = false;
  }
  hostNewer_ |= callerWrites;
}

llvm::Expected<Tensor> StreamExecutor::activationView(int i, int32_t act, int mb, bool checkFilled, bool backward) {
  const plan::Activation &a = plan_.activations(act);
  const int64_t bytes = plan::typeBytes(a.type());
  const bool loaded = backward && loadedCheckpoints_.count({act, mb});
  const auto kind = plan::activationRegion(a, loaded);
  int64_t off = 0;
  auto p = region(kind, act, bytes, &off, mb);
  if (!p) return p.takeError();
  if (checkFilled)
    if (auto e = expect(i, (loaded ? loaded_ : activation_)[at(act, mb)],
                        loaded ? "activation '" + a.name() + "' brought back" : "activation '" + a.name() + "'", -1, off, bytes, shadow_))
      return std::move(e);
  return viewOf(*p, a.type());
}

llvm::Error StreamExecutor::saveCheckpoint(int i, const plan::StreamAction &a) {
  const int act = a.activation(), mb = a.micro_batch();
  const plan::Activation &ac = plan_.activations(act);
  const int64_t bytes = plan::typeBytes(ac.type());
  if (producer_[size_t(act)] != a.unit()) return err("schedule: " + actionText(i) + ": the unit does not write the activation");
  int64_t off = 0;
  auto p = region(plan::DeviceRegion::CHECKPOINT, act, bytes, &off, mb);
  if (!p) return p.takeError();
  if (auto e = expect(i, activation_[at(act, mb)], "activation '" + ac.name() + "'", -1, off, bytes, shadow_)) return e;
  std::memcpy(hostCheckpoints_.data() + a.host_offset(), *p, size_t(bytes));
  hostCopy_[at(act, mb)] = fill(i, -1, a.host_offset(), bytes, checkpointShadow_, "the host's copy of '" + ac.name() + "'");
  return llvm::Error::success();
}

llvm::Error StreamExecutor::loadCheckpoint(int i, const plan::StreamAction &a) {
  const int act = a.activation(), mb = a.micro_batch();
  const plan::Activation &ac = plan_.activations(act);
  const int64_t bytes = plan::typeBytes(ac.type());
  if (auto e = expect(i, hostCopy_[at(act, mb)], "the host's copy of '" + ac.name() + "'", -1, a.host_offset(), bytes, checkpointShadow_))
    return e;
  int64_t off = 0;
  auto p = region(plan::DeviceRegion::LOADED_CHECKPOINT, act, bytes, &off, mb);
  if (!p) return p.takeError();
  std::memcpy(*p, hostCheckpoints_.data() + a.host_offset(), size_t(bytes));
  loaded_[at(act, mb)] = fill(i, -1, off, bytes, shadow_, "activation '" + ac.name() + "' brought back");
  return llvm::Error::success();
}

llvm::Error StreamExecutor::prefetch(int i, const plan::StreamAction &a) {
  const int u = a.unit(), k = a.weight_slot();
  const plan::Unit &unit = plan_.units(u);
  if (unit.resident()) return err("schedule: " + actionText(i) + ": the unit is resident; its weights do not stream");
  if (k < 0 || k >= s_->weight_slots()) return err("schedule: " + actionText(i) + " names no weight slot");
  const plan::WeightLayout &lay = layouts_[size_t(u)];
  // The host's weights of the unit are final for this step: no earlier
  // step's UPDATE of a unit sharing them is still to run.
  for (const auto &[tag, c] : passes_) {
    if (tag >= pass_ || !c.backward) continue;
    for (int v : plan::unitsSharingParameters(plan_, u))
      if (plan::steppedOnHost(plan_.units(v)) && !c.updateRan[size_t(v)])
        return err("schedule: " + actionText(i) + " copies the host's weights of '" + unit.name() +
                   "' before an earlier step's UPDATE of '" + plan_.units(v).name() + "' ran");
  }
  int64_t off = 0;
  auto slot = region(plan::DeviceRegion::WEIGHT_SLOT, k, lay.bytes, &off);
  if (!slot) return slot.takeError();
  copyUnit(u, state_.params, *slot, /*toDevice=*/true);
  if (auto e = streamBf16(i, u, *slot)) return e;
  weightSlot_[size_t(k)] = fill(i, u, off, lay.bytes, shadow_, "weight slot " + std::to_string(k) + " (unit '" + unit.name() + "')");
  return llvm::Error::success();
}

llvm::Error StreamExecutor::compute(int i, const plan::StreamAction &a) {
  const bool fwd = a.kind() == plan::StreamAction::FORWARD;
  const int u = a.unit();
  const plan::Unit &unit = plan_.units(u);
  const size_t tid = size_t(unit.template_id());
  if (tid >= forward_.size()) return err("schedule: " + actionText(i) + ": the unit has no template");
  const plan::Template &tp = plan_.templates(int(tid));
  const bool keep = unit.keep_activations();
  const PreparedProgram &prog = keep ? (fwd ? forwardKeep_ : backwardKept_).at(tid) : (fwd ? forward_ : backward_)[tid];
  const plan::Program &pp = fwd ? plan::forwardProgram(plan_, u) : plan::backwardProgram(plan_, u);
  const std::string progName = "template '" + tp.name() + "' " + (fwd ? "forward" : "backward");
  const plan::WeightLayout &lay = layouts_[size_t(u)];
  std::vector<Tensor> args, results;
  // Micro-batch mb of the pass (init checked the range).
  const int mb = a.micro_batch();
  const bool lastMb = mb == M_ - 1;

  for (int32_t act : unit.activation_inputs()) {
    auto v = activationView(i, act, mb, true, !fwd);
    if (!v) return v.takeError();
    args.push_back(*v);
  }
  // The weights: the unit's weight slot, or its RESIDENT region.
  uint8_t *w = nullptr;
  if (unit.resident()) {
    const plan::ResidentLayout rl = plan::residentLayout(plan_, u);
    int64_t off = 0;
    auto r = region(plan::DeviceRegion::RESIDENT, u, rl.bytes, &off);
    if (!r) return r.takeError();
    if (resident_[size_t(u)].stamp < 0) return err("schedule: " + actionText(i) + ": the resident unit's weights were never copied in");
    if (opts_.checkReads) {
      std::string bad = shadow_.check(off + rl.weights, lay.bytes, resident_[size_t(u)].stamp);
      if (!bad.empty()) return err("schedule: " + actionText(i) + " reads the weights of resident unit '" + unit.name() + "', but its " + bad);
    }
    w = *r + rl.weights;
  } else {
    const int k = a.weight_slot();
    if (k < 0 || k >= s_->weight_slots()) return err("schedule: " + actionText(i) + " names no weight slot");
    int64_t off = 0;
    auto slot = region(plan::DeviceRegion::WEIGHT_SLOT, k, lay.bytes, &off);
    if (!slot) return slot.takeError();
    if (auto e = expect(i, weightSlot_[size_t(k)], "weight slot " + std::to_string(k), u, off, lay.bytes, shadow_)) return e;
    w = *slot;
  }
  for (int j = 0; j < unit.parameters_size(); ++j)
    args.push_back(viewOf(w + lay.offsets[size_t(j)], plan_.parameters(unit.parameters(j)).type()));

  // A keeping unit's saved values: its FORWARD writes them, its BACKWARD reads them.
  std::vector<Tensor> saved;
  int64_t savedOff = 0;
  if (keep) {
    const plan::SavedLayout &sl = savedLayouts_[tid];
    auto base = region(plan::DeviceRegion::SAVED, u, sl.bytes, &savedOff, mb);
    if (!base) return base.takeError();
    const plan::Program &f = tp.forward_keep();
    for (size_t k = 0; k < sl.offsets.size(); ++k) {
      int32_t v = f.results(tp.num_activation_outputs() + int(k));
      saved.push_back(viewOf(*base + sl.offsets[k], f.values(v).type()));
    }
    if (!fwd)
      if (auto e = expect(i, saved_[at(u, mb)], "the saved values of unit '" + unit.name() + "'", -1, savedOff, sl.bytes, shadow_))
        return e;
  }

  // Input gradients that go to a temporary (another consumer's is in the
  // region already: summed after the run; or data, whose gradient nothing reads).
  std::vector<Tensor> viaTemp;
  int64_t gslotOff = 0;
  if (fwd) {
    for (int32_t act : unit.activation_outputs()) {
      auto v = activationView(i, act, mb, false);
      if (!v) return v.takeError();
      results.push_back(*v);
    }
    results.insert(results.end(), saved.begin(), saved.end());
  } else {
    for (int32_t act : unit.activation_outputs()) {
      const plan::Activation &ac = plan_.activations(act);
      const int64_t bytes = plan::typeBytes(ac.type());
      int64_t off = 0;
      auto g = region(plan::DeviceRegion::ACTIVATION_GRAD, act, bytes, &off, mb);
      if (!g) return g.takeError();
      bool fromConsumer = false;
      for (auto [c, pos] : users_[size_t(act)]) fromConsumer |= gradFlows(c, pos);
      if (ac.kind() == plan::Activation::LOSS || !fromConsumer) {
        // The loss's seed, or zeros where no later unit differentiates it: the runtime fills it now.
        Tensor t = viewOf(*g, ac.type());
        std::memset(*g, 0, size_t(bytes));
        if (ac.kind() == plan::Activation::LOSS) t.setFromDouble(0, lossScales_[size_t(mb)]);
        activationGrad_[at(act, mb)] = fill(i, -1, off, bytes, shadow_, "the gradient of '" + ac.name() + "'");
      } else if (auto e = expect(i, activationGrad_[at(act, mb)], "the gradient of '" + ac.name() + "'", -1, off, bytes, shadow_)) {
        return e;
      }
      args.push_back(viewOf(*g, ac.type()));
    }
    args.insert(args.end(), saved.begin(), saved.end());
    for (int k = 0; k < unit.activation_inputs_size(); ++k) {
      if (!tp.input_has_gradient(k)) continue;
      const int32_t act = unit.activation_inputs(k);
      const plan::Activation &ac = plan_.activations(act);
      if (producer_[size_t(act)] < 0 || activationGrad_[at(act, mb)].pass == pass_) {
        viaTemp.push_back(Tensor(DType(int(ac.type().dtype())), Shape(ac.type().shape().begin(), ac.type().shape().end())));
        results.push_back(viaTemp.back());
        continue;
      }
      viaTemp.emplace_back();
      auto g = region(plan::DeviceRegion::ACTIVATION_GRAD, act, plan::typeBytes(ac.type()), nullptr, mb);
      if (!g) return g.takeError();
      results.push_back(viewOf(*g, ac.type()));
    }
    const int gs = a.grad_slot();
    if (gs < 0 || gs >= s_->grad_slots()) return err("schedule: " + actionText(i) + " names no grad slot");
    auto gslot = region(plan::DeviceRegion::GRAD_SLOT, gs, lay.bytes, &gslotOff);
    if (!gslot) return gslot.takeError();
    // A later micro-batch adds to what the earlier ones summed in the slot:
    // the slot must hold this unit's gradients of micro-batch mb-1, this pass.
    if (mb > 0) {
      const Fill &f = gradSlot_[size_t(gs)];
      if (auto e = expect(i, f, "grad slot " + std::to_string(gs), u, gslotOff, lay.bytes, shadow_)) return e;
      if (f.action < 0 || s_->actions(f.action).kind() != plan::StreamAction::BACKWARD ||
          s_->actions(f.action).micro_batch() != mb - 1)
        return err("schedule: " + actionText(i) + " adds micro-batch " + std::to_string(mb) + "'s gradients to grad slot " +
                   std::to_string(gs) + ", which holds what " + (f.action >= 0 ? actionText(f.action) : std::string("the runtime")) +
                   " wrote, not the unit's sum to micro-batch " + std::to_string(mb - 1));
    }
    for (int j = 0; j < unit.parameters_size(); ++j) {
      const plan::TensorType &t = plan_.parameters(unit.parameters(j)).type();
      if (mb == 0) results.push_back(viewOf(*gslot + lay.offsets[size_t(j)], t));
      else results.push_back(Tensor(DType(int(t.dtype())), Shape(t.shape().begin(), t.shape().end())));
    }
  }

  int64_t arenaOff = 0;
  auto arena = region(plan::DeviceRegion::ARENA, 0, prog.arenaBytes(), &arenaOff);
  if (!arena) return arena.takeError();
  std::optional<ArenaShadow> obs;
  if (opts_.checkReads) obs.emplace(*this, i, arenaOff, size_t(pp.values_size()), progName);
  if (auto e = prog.runInArena(args, *arena, regions_.at({int(plan::DeviceRegion::ARENA), 0, 0})->bytes(), results,
                               obs ? &*obs : nullptr))
    return err("unit '" + unit.name() + "'" + (fwd ? "" : " backward") + ": " + llvm::toString(std::move(e)));

  // What the action wrote.
  if (fwd) {
    for (int32_t act : unit.activation_outputs()) {
      const plan::Activation &ac = plan_.activations(act);
      int64_t off = 0;
      auto v = region(plan::DeviceRegion::CHECKPOINT, act, plan::typeBytes(ac.type()), &off, mb);
      if (!v) return v.takeError();
      activation_[at(act, mb)] = fill(i, -1, off, plan::typeBytes(ac.type()), shadow_, "activation '" + ac.name() + "'");
      if (ac.kind() == plan::Activation::LOSS) {
        const double loss = viewOf(*v, ac.type()).getAsDouble(0);
        losses_[size_t(mb)] = loss;
        if (backwardPass_ && !std::isfinite(loss) && !plan_.optimizer().no_finite_check()) {
          // Only the early AdamW of rows no token read may have run (UPDATE_UNREAD_ROWS).
          const std::vector<std::string> &early = passes_.at(pass_).unreadRowsStepped;
          return llvm::make_error<runtime::NonFiniteError>(
              "the loss is " + std::to_string(loss) + (early.empty() ? " (forward, before any update)" : " (forward)") +
                  (M_ > 1 ? " in micro-batch " + std::to_string(mb) + " of the pass" : std::string()),
              runtime::updatedUnitList({}, early));
        }
      }
    }
    if (keep)
      saved_[at(u, mb)] = fill(i, -1, savedOff, savedLayouts_[tid].bytes, shadow_, "the saved values of unit '" + unit.name() + "'");
    return llvm::Error::success();
  }
  size_t r = 0;
  for (int k = 0; k < unit.activation_inputs_size(); ++k) {
    if (!tp.input_has_gradient(k)) continue;
    const int32_t act = unit.activation_inputs(k);
    const plan::Activation &ac = plan_.activations(act);
    const int64_t bytes = plan::typeBytes(ac.type());
    const Tensor &tmp = viaTemp[r++];
    if (producer_[size_t(act)] < 0) continue; // data: nothing reads its gradient
    int64_t off = 0;
    auto gr = region(plan::DeviceRegion::ACTIVATION_GRAD, act, bytes, &off, mb);
    if (!gr) return gr.takeError();
    if (tmp.defined()) { // another consumer's gradient is there: add this one, as the direct path does
      if (auto e = expect(i, activationGrad_[at(act, mb)], "the gradient of '" + ac.name() + "'", -1, off, bytes, shadow_)) return e;
      cpu::addInto(reinterpret_cast<float *>(*gr), tmp.data<float>(), tmp.numel());
    }
    activationGrad_[at(act, mb)] = fill(i, -1, off, bytes, shadow_, "the gradient of '" + ac.name() + "'");
  }
  // A later micro-batch's parameter gradients, added to the slot's sum (in
  // micro-batch order: the host's accumulation over passes adds them so).
  for (int j = 0; mb > 0 && j < unit.parameters_size(); ++j) {
    const Tensor &t = results[results.size() - size_t(unit.parameters_size()) + size_t(j)];
    cpu::addInto(reinterpret_cast<float *>(dev_ + gslotOff + lay.offsets[size_t(j)]), t.data<float>(), t.numel());
  }
  // The slot holds the unit's gradients once its last micro-batch has added to them.
  if (lastMb && injectNan_ && injectNan_->at(unit.name(), state_.step) && unit.parameters_size() > 0)
    reinterpret_cast<float *>(dev_ + gslotOff + lay.offsets[0])[0] = NAN;
  if (lastMb && !plan_.optimizer().no_finite_check() && backwardPass_) {
    for (int k = 0; k < unit.parameters_size() && !poison_; ++k) {
      const plan::Parameter &p = plan_.parameters(unit.parameters(k));
      const float *g = reinterpret_cast<const float *>(dev_ + gslotOff + lay.offsets[size_t(k)]);
      int64_t bad = runtime::firstNonFinite(g, p.numel());
      if (bad < 0) continue;
      poison_ = true;
      firstBad_ = runtime::nonFiniteGradientMessage(unit.name(), p.name(), std::to_string(g[bad]), bad);
    }
    slotVerdict_[size_t(a.grad_slot())] = poison_;
  }
  gradSlot_[size_t(a.grad_slot())] =
      fill(i, u, gslotOff, lay.bytes, shadow_, "grad slot " + std::to_string(a.grad_slot()) + " (unit '" + unit.name() + "')");
  return llvm::Error::success();
}

// What leaves grad slot g (OFFLOAD, a GPU UPDATE) is the whole pass's sum:
// the slot was last written by its unit's last micro-batch.
llvm::Error StreamExecutor::expectWholeSum(int i, int g) const {
  const int by = gradSlot_[size_t(g)].action;
  if (by >= 0 && s_->actions(by).kind() == plan::StreamAction::BACKWARD && s_->actions(by).micro_batch() == M_ - 1)
    return llvm::Error::success();
  return err("schedule: " + actionText(i) + " reads grad slot " + std::to_string(g) + " before the unit's last micro-batch added to it (it holds what " +
             (by >= 0 ? actionText(by) : std::string("the runtime")) + " wrote)");
}

llvm::Error StreamExecutor::offload(int i, const plan::StreamAction &a) {
  const int u = a.unit(), g = a.grad_slot();
  if (plan_.units(u).resident()) return err("schedule: " + actionText(i) + ": the unit is resident; its gradients stay");
  if (g < 0 || g >= s_->grad_slots()) return err("schedule: " + actionText(i) + " names no grad slot");
  const plan::WeightLayout &lay = layouts_[size_t(u)];
  int64_t off = 0;
  auto slot = region(plan::DeviceRegion::GRAD_SLOT, g, lay.bytes, &off);
  if (!slot) return slot.takeError();
  if (auto e = expect(i, gradSlot_[size_t(g)], "grad slot " + std::to_string(g), u, off, lay.bytes, shadow_)) return e;
  if (auto e = expectWholeSum(i, g)) return e;
  if (lay.bytes > plan::gradSlotBytes(*s_, g)) return err("schedule: " + actionText(i) + ": the unit's gradients do not fit its staging slot");
  const int64_t stagingOff = plan::stagingOffset(*s_, g);
  std::memcpy(staging_.data() + stagingOff, *slot, size_t(lay.bytes));
  stagingVerdict_[size_t(g)] = slotVerdict_[size_t(g)];
  stagingSlot_[size_t(g)] = fill(i, u, stagingOff, lay.bytes, stagingShadow_,
                                 "staging slot " + std::to_string(g) + " (unit '" + plan_.units(u).name() + "')");
  return llvm::Error::success();
}

// One unit's AdamW from its gradients at `base` (in its slot layout), as the
// direct CPU path applies it: on the host arrays, or (`dev`) on the unit's
// weights and moments in the simulated device memory; with the step's
// gradients kept (grads_), added to them instead. Nothing where `poisoned`.
llvm::Error StreamExecutor::updateFrom(int u, const uint8_t *base, bool poisoned, const DeviceAdamw *dev) {
  const plan::Unit &unit = plan_.units(u);
  const plan::WeightLayout &lay = layouts_[size_t(u)];
  if (poisoned) return llvm::Error::success(); // this unit or one before it held NaN/Inf: no update
  for (int k = 0; k < unit.parameters_size(); ++k) {
    const int32_t pid = unit.parameters(k);
    const plan::Parameter &p = plan_.parameters(pid);
    const int64_t o = lay.offsets[size_t(k)];
    const float *g = reinterpret_cast<const float *>(base + o);
    const std::vector<runtime::RowRun> *read = dev ? nullptr : earlyRows(pid); // the rest stepped early
    if (grads_) {
      float *dst = grads_->data() + p.host_offset();
      cpu::addInto(dst, g, p.numel());
      if (stepWhenSummed_ && --sumPending_[size_t(pid)] == 0) {
        if (read) stepReadRows(pid, *read, dst, lr_);
        else updateParam(pid, dst, lr_, 1.0f);
      }
      continue;
    }
    if (read) {
      stepReadRows(pid, *read, g, lr_);
      continue;
    }
    if (dev) {
      updateParamAt(pid, reinterpret_cast<float *>(dev->weights + o), g, reinterpret_cast<float *>(dev->m + o),
                    reinterpret_cast<float *>(dev->v + o), lr_, 1.0f);
      continue;
    }
    updateOrAccumulate(pid, g, lr_, pending_, partial_);
  }
  if (!grads_ || stepWhenSummed_) (*updated_)[size_t(u)] = true;
  return llvm::Error::success();
}

// A streamed unit's UPDATE: the host's AdamW from its staging slot. A
// resident unit's, or an adamw_on_gpu one's: on the compute stream from its
// grad slot, into its RESIDENT region, or its weight slot and MOMENT_SLOT.
llvm::Error StreamExecutor::update(int i, const plan::StreamAction &a) {
  const int u = a.unit(), g = a.grad_slot();
  const plan::Unit &unit = plan_.units(u);
  if (g < 0 || g >= s_->grad_slots()) return err("schedule: " + actionText(i) + " names no grad slot");
  const plan::WeightLayout &lay = layouts_[size_t(u)];
  if (!unit.resident() && !onGpu(u)) {
    if (a.stream() != plan::StreamAction::CPU) return err("schedule: " + actionText(i) + ": a streamed unit's UPDATE runs on the CPU");
    const int64_t off = plan::stagingOffset(*s_, g);
    if (auto e = expect(i, stagingSlot_[size_t(g)], "staging slot " + std::to_string(g), u, off, lay.bytes, stagingShadow_)) return e;
    passes_.at(pass_).updateRan[size_t(u)] = true;
    return updateFrom(u, staging_.data() + off, stagingVerdict_[size_t(g)], nullptr);
  }
  if (a.stream() != plan::StreamAction::COMPUTE)
    return err("schedule: " + actionText(i) + ": the unit's AdamW runs on the GPU, on the compute stream");
  int64_t gOff = 0;
  auto gs = region(plan::DeviceRegion::GRAD_SLOT, g, lay.bytes, &gOff);
  if (!gs) return gs.takeError();
  if (auto e = expect(i, gradSlot_[size_t(g)], "grad slot " + std::to_string(g), u, gOff, lay.bytes, shadow_)) return e;
  if (auto e = expectWholeSum(i, g)) return e;
  const bool poisoned = poison_ && !plan_.optimizer().no_finite_check();
  if (unit.resident()) {
    const plan::ResidentLayout rl = plan::residentLayout(plan_, u);
    int64_t resOff = 0;
    auto r = region(plan::DeviceRegion::RESIDENT, u, rl.bytes, &resOff);
    if (!r) return r.takeError();
    const DeviceAdamw dev{*r + rl.weights, *r + rl.m, *r + rl.v};
    if (auto e = updateFrom(u, *gs, poisoned, &dev)) return e;
    if (!poisoned && !grads_) {
      resident_[size_t(u)] = fill(i, u, resOff, rl.bytes, shadow_, "the weights and moments of resident unit '" + unit.name() + "'");
      resident_[size_t(u)].pass = -2;
      deviceNewer_ = true;
    }
    return llvm::Error::success();
  }
  const int k = a.weight_slot();
  if (k < 0 || k >= s_->weight_slots()) return err("schedule: " + actionText(i) + " names no weight slot");
  const plan::MomentLayout ml = plan::momentLayout(plan_, u);
  int64_t wOff = 0, mOff = 0;
  auto ws = region(plan::DeviceRegion::WEIGHT_SLOT, k, lay.bytes, &wOff);
  if (!ws) return ws.takeError();
  auto ms = region(plan::DeviceRegion::MOMENT_SLOT, k, ml.bytes, &mOff);
  if (!ms) return ms.takeError();
  if (auto e = expect(i, weightSlot_[size_t(k)], "weight slot " + std::to_string(k), u, wOff, lay.bytes, shadow_)) return e;
  if (auto e = expect(i, momentSlot_[size_t(k)], "moment slot " + std::to_string(k), u, mOff, ml.bytes, shadow_)) return e;
  const DeviceAdamw dev{*ws, *ms + ml.m, *ms + ml.v};
  if (auto e = updateFrom(u, *gs, poisoned, &dev)) return e;
  // The slots now hold what this UPDATE left (stepped, or as they were), which WRITEBACK checks for.
  weightSlot_[size_t(k)] = fill(i, u, wOff, lay.bytes, shadow_, "weight slot " + std::to_string(k) + " (unit '" + unit.name() + "', stepped)");
  momentSlot_[size_t(k)] = fill(i, u, mOff, ml.bytes, shadow_, "moment slot " + std::to_string(k) + " (unit '" + unit.name() + "', stepped)");
  return llvm::Error::success();
}

// The host's AdamW, with a zero gradient, of the rows of the unit's
// token-indexed tables that no token of the step reads, in a pass that steps
// (runtime/plan/TokenRows.h); the unit's UPDATE then steps the others.
llvm::Error StreamExecutor::updateUnreadRows(int i, const plan::StreamAction &a) {
  if (a.stream() != plan::StreamAction::CPU) return err("schedule: " + actionText(i) + " runs on the CPU");
  // The plan checker saw that the unit has such a table.
  if (passSteps() && stepUnreadRows(a.unit(), rows_.get(), lr_, state_.step, cpu::numThreads()))
    passes_.at(pass_).unreadRowsStepped.push_back(plan_.units(a.unit()).name());
  return llvm::Error::success();
}

// FETCH_MOMENTS and WRITEBACK: of an adamw_on_gpu unit, on its weight slot.
llvm::Error StreamExecutor::checkMomentAction(int i, const plan::StreamAction &a) const {
  if (!onGpu(a.unit())) return err("schedule: " + actionText(i) + ": the unit does not run its AdamW on the GPU");
  if (a.weight_slot() < 0 || a.weight_slot() >= s_->weight_slots())
    return err("schedule: " + actionText(i) + " names no weight slot");
  return llvm::Error::success();
}

llvm::Error StreamExecutor::fetchMoments(int i, const plan::StreamAction &a) {
  if (auto e = checkMomentAction(i, a)) return e;
  const int u = a.unit(), k = a.weight_slot();
  const plan::Unit &unit = plan_.units(u);
  const plan::MomentLayout ml = plan::momentLayout(plan_, u);
  int64_t off = 0;
  auto slot = region(plan::DeviceRegion::MOMENT_SLOT, k, ml.bytes, &off);
  if (!slot) return slot.takeError();
  copyUnit(u, state_.m, *slot + ml.m, /*toDevice=*/true);
  copyUnit(u, state_.v, *slot + ml.v, /*toDevice=*/true);
  momentSlot_[size_t(k)] = fill(i, u, off, ml.bytes, shadow_, "moment slot " + std::to_string(k) + " (unit '" + unit.name() + "')");
  return llvm::Error::success();
}

llvm::Error StreamExecutor::writeback(int i, const plan::StreamAction &a) {
  if (auto e = checkMomentAction(i, a)) return e;
  const int u = a.unit(), k = a.weight_slot();
  const plan::WeightLayout &lay = layouts_[size_t(u)];
  const plan::MomentLayout ml = plan::momentLayout(plan_, u);
  int64_t wOff = 0, mOff = 0;
  auto ws = region(plan::DeviceRegion::WEIGHT_SLOT, k, lay.bytes, &wOff);
  if (!ws) return ws.takeError();
  auto ms = region(plan::DeviceRegion::MOMENT_SLOT, k, ml.bytes, &mOff);
  if (!ms) return ms.takeError();
  // Both must be what this unit's UPDATE left (its weights stepped, not only prefetched).
  for (auto [f, what] : {std::pair<const Fill *, const char *>{&weightSlot_[size_t(k)], "weight slot "}, {&momentSlot_[size_t(k)], "moment slot "}}) {
    const bool weights = f == &weightSlot_[size_t(k)];
    if (auto e = expect(i, *f, what + std::to_string(k), u, weights ? wOff : mOff, weights ? lay.bytes : ml.bytes, shadow_)) return e;
    if (f->action < 0 || s_->actions(f->action).kind() != plan::StreamAction::UPDATE)
      return err("schedule: " + actionText(i) + " writes back " + what + std::to_string(k) + " before the unit's UPDATE stepped it (it holds what " +
                 (f->action >= 0 ? actionText(f->action) : std::string("the runtime")) + " wrote)");
  }
  copyUnit(u, state_.params, *ws, /*toDevice=*/false);
  copyUnit(u, state_.m, *ms + ml.m, /*toDevice=*/false);
  copyUnit(u, state_.v, *ms + ml.v, /*toDevice=*/false);
  return llvm::Error::success();
}

llvm::Error StreamExecutor::execute(int i) {
  const plan::StreamAction &a = s_->actions(i);
  switch (a.kind()) {
  case plan::StreamAction::PREFETCH: return prefetch(i, a);
  case plan::StreamAction::FORWARD:
  case plan::StreamAction::BACKWARD: return compute(i, a);
  case plan::StreamAction::OFFLOAD: return offload(i, a);
  case plan::StreamAction::UPDATE: return update(i, a);
  case plan::StreamAction::FETCH_MOMENTS: return fetchMoments(i, a);
  case plan::StreamAction::WRITEBACK: return writeback(i, a);
  case plan::StreamAction::SAVE_CHECKPOINT: return saveCheckpoint(i, a);
  case plan::StreamAction::LOAD_CHECKPOINT: return loadCheckpoint(i, a);
  case plan::StreamAction::UPDATE_UNREAD_ROWS: return updateUnreadRows(i, a);
  default: return err("schedule: action " + llvm::Twine(i) + " has an unknown kind");
  }
}

llvm::Error StreamExecutor::runPass(const std::vector<std::pair<Tensor, Tensor>> &microBatches, bool backward,
                                    const std::vector<float> &lossScales, std::vector<float> *grads, float lr,
                                    std::vector<double> &losses, bool stepWhenSummed) {
  if (auto e = checkPassSize(microBatches.size(), backward, lossScales.size())) return e;
  ++pass_;
  backwardPass_ = backward;
  lossScales_ = lossScales;
  lossScales_.resize(size_t(M_), 0.0f);
  lr_ = lr;
  grads_ = grads;
  stepWhenSummed_ = grads && stepWhenSummed;
  if (stepWhenSummed_) {
    sumPending_.assign(size_t(plan_.parameters_size()), 0);
    for (int p = 0; p < plan_.parameters_size(); ++p) sumPending_[size_t(p)] = plan_.parameters(p).units_size();
  }
  losses_.assign(size_t(M_), NAN);
  poison_ = false;
  firstBad_.clear();
  PassContext &ctx = passes_[pass_];
  ctx.backward = backward;
  ctx.lr = lr;
  ctx.step = state_.step;
  ctx.grads = grads;
  ctx.stepWhenSummed = stepWhenSummed_;
  ctx.rows = stepRows_;
  rows_ = stepRows_;
  ctx.updated.assign(size_t(plan_.units_size()), false);
  ctx.updateRan = ctx.updated;
  ctx.times.assign(size_t(s_->actions_size()), {0.0, 0.0});
  // A tied parameter's partial sums: none is in flight once every earlier UPDATE has run.
  if (sim_->idle()) {
    pending_.assign(size_t(plan_.parameters_size()), 0);
    for (int p = 0; p < plan_.parameters_size(); ++p) pending_[size_t(p)] = plan_.parameters(p).units_size();
    partial_.assign(size_t(plan_.parameters_size()), {});
  }
  if (anyResident_ && hostNewer_) {
    copyResident(true);
    hostNewer_ = false;
  }
  if (bf16Stale_) refreshBf16Weights();
  // The micro-batches' data, before any action (a forward-only pass given
  // fewer: the last one's again).
  for (int mb = 0; mb < M_; ++mb) {
    const auto &[tokens, targets] = microBatches[std::min(size_t(mb), microBatches.size() - 1)];
    for (int i = 0; i < plan_.activations_size(); ++i) {
      const plan::Activation &a = plan_.activations(i);
      if (a.kind() != plan::Activation::DATA_TOKENS && a.kind() != plan::Activation::DATA_TARGETS) continue;
      if (users_[size_t(i)].empty()) continue;
      auto t = dataTensor(a, a.kind() == plan::Activation::DATA_TOKENS ? tokens : targets);
      if (!t) return t.takeError();
      int64_t off = 0;
      auto p = region(plan::DeviceRegion::DATA, i, int64_t(t->nbytes()), &off, mb);
      if (!p) return p.takeError();
      std::memcpy(*p, t->raw(), t->nbytes());
      activation_[at(i, mb)] = fill(-1, -1, off, int64_t(t->nbytes()), shadow_, "data '" + a.name() + "'");
    }
  }
  std::vector<int> actions;
  int last = s_->actions_size() - 1;
  if (!backward) {
    last = -1;
    for (int i = 0; i < s_->actions_size(); ++i)
      if (s_->actions(i).kind() == plan::StreamAction::FORWARD) last = i;
  }
  for (int i = 0; i <= last; ++i) {
    const auto k = s_->actions(i).kind();
    if (backward || k == plan::StreamAction::PREFETCH || k == plan::StreamAction::FORWARD) actions.push_back(i);
  }
  runtime::PlanComputeScope compute(plan_, emulateCompute_);
  ctx.start = std::chrono::steady_clock::now();
  // Each micro-batch its own interleaving, the same in every run with this
  // seed. Overlapping steps: the pass ends with the GPU streams idle; its
  // host AdamW runs on into the next pass (a step that keeps its gradients
  // waits for it).
  const bool carry = s_->overlap_steps() && !grads;
  if (auto e = sim_->run(actions, opts_.streamSeed * 0x9e3779b97f4a7c15ull + uint64_t(pass_), pass_, carry,
                         [&](int i, int64_t tag) { return executeIn(i, tag); })) {
    passes_.clear();
    return e;
  }
  if (poison_) {
    // The verdict names the units updated before the bad one: all of this pass's UPDATEs run first.
    if (auto e = sim_->drain([&](int i, int64_t tag) { return executeIn(i, tag); })) {
      passes_.clear();
      return e;
    }
    std::vector<int> order;
    for (int u = 0; u < plan_.units_size(); ++u)
      if (ctx.updated[size_t(u)]) order.push_back(u);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return bwdPos_[size_t(a)] < bwdPos_[size_t(b)]; });
    std::vector<std::string> updated;
    for (int u : order) updated.push_back(plan_.units(u).name());
    const std::vector<std::string> early = ctx.unreadRowsStepped;
    retirePasses();
    return llvm::make_error<runtime::NonFiniteError>(firstBad_, runtime::updatedUnitList(updated, early));
  }
  retirePasses();
  losses.assign(losses_.begin(), losses_.begin() + long(microBatches.size()));
  return llvm::Error::success();
}

llvm::Error StreamExecutor::executeIn(int i, int64_t tag) {
  auto it = passes_.find(tag);
  if (it == passes_.end()) return err("schedule: " + actionText(i) + " belongs to no pass in flight");
  PassContext &c = it->second;
  // Another step's UPDATE runs with that step's numbers; this pass's are restored after.
  const int64_t pass = pass_, step = state_.step;
  const float lr = lr_;
  std::vector<float> *grads = grads_;
  const bool summed = stepWhenSummed_;
  std::shared_ptr<const runtime::StepTokenRows> rows = rows_;
  pass_ = tag;
  state_.step = c.step;
  lr_ = c.lr;
  grads_ = c.grads;
  stepWhenSummed_ = c.stepWhenSummed;
  rows_ = c.rows;
  updated_ = &c.updated;
  const auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - c.start).count(); };
  const double t0 = since();
  llvm::Error r = execute(i);
  c.times[size_t(i)] = {t0, since()};
  pass_ = pass;
  state_.step = step;
  lr_ = lr;
  grads_ = grads;
  stepWhenSummed_ = summed;
  rows_ = rows;
  return r;
}

llvm::Error StreamExecutor::drainCarried() {
  if (!sim_ || sim_->idle()) return llvm::Error::success();
  if (auto e = sim_->drain([&](int i, int64_t tag) { return executeIn(i, tag); })) {
    passes_.clear();
    return e;
  }
  retirePasses();
  return llvm::Error::success();
}

void StreamExecutor::retirePasses() {
  const std::vector<int64_t> pending = sim_->pendingTags();
  for (auto it = passes_.begin(); it != passes_.end();) {
    if (std::find(pending.begin(), pending.end(), it->first) != pending.end()) {
      ++it;
      continue;
    }
    if (it->second.backward) lastTimes_ = std::move(it->second.times);
    it = passes_.erase(it);
  }
}

llvm::Expected<double> StreamExecutor::forwardBackward(const Tensor &tokens, const Tensor &targets, float lossScale,
                                                       std::vector<float> *grads, float lr) {
  return forwardBackwardAsPass(tokens, targets, lossScale, grads, lr);
}

llvm::Expected<std::vector<double>> StreamExecutor::forwardBackwardPass(
    const std::vector<std::pair<Tensor, Tensor>> &microBatches, const std::vector<float> &lossScales,
    std::vector<float> *grads, float lr, bool stepWhenSummed) {
  if (grads && int64_t(grads->size()) < hostElements_) return err("forwardBackward: the gradient array is too small");
  std::vector<double> losses;
  if (auto e = runPass(microBatches, true, lossScales, grads, lr, losses, stepWhenSummed)) return std::move(e);
  return losses;
}

llvm::Expected<double> StreamExecutor::evalLoss(const Tensor &tokens, const Tensor &targets) {
  auto losses = evalLosses({{tokens, targets}});
  if (!losses) return losses.takeError();
  return losses->front();
}

llvm::Expected<std::vector<double>> StreamExecutor::evalLosses(const std::vector<std::pair<Tensor, Tensor>> &batches) {
  return evalInPasses(batches, [&](const std::vector<std::pair<Tensor, Tensor>> &pass, std::vector<double> &losses) {
    return runPass(pass, false, {}, nullptr, 0.0f, losses);
  });
}

} // namespace

llvm::Expected<std::unique_ptr<runtime::Trainer>> createStreamExecutor(const plan::Plan &plan,
                                                                       const runtime::CpuOptions &opts) {
  std::unique_ptr<StreamExecutor> t(new StreamExecutor(plan, opts));
  if (auto e = t->init()) return std::move(e);
  return std::unique_ptr<runtime::Trainer>(std::move(t));
}

} // namespace megac::stream

namespace megac::runtime {

// The CPU backend's factory lives with its default backend, so that
// runtime/train does not depend on runtime/stream (tools/check_layers.py).
llvm::Expected<std::unique_ptr<Trainer>> Trainer::create(const plan::Plan &plan, const CpuOptions &opts) {
  if (opts.streamSchedule) return stream::createStreamExecutor(plan, opts);
  std::unique_ptr<Trainer> t(new Trainer(plan));
  if (auto e = t->preparePrograms()) return std::move(e);
  if (auto e = t->initHostState()) return std::move(e);
  return std::move(t);
}

} // namespace megac::runtime
