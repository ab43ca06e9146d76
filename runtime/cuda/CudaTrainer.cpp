#include "runtime/cuda/CudaTrainer.h"

#include "runtime/train/NonFinite.h"

#include "runtime/cuda/AdamWKernels.h"
#include "runtime/cuda/FiniteCheckKernels.h"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuProgram.h"
#include "runtime/cuda/LtMatmul.h"
#include "runtime/cuda/OpTimer.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/StreamLayout.h"
#include "runtime/plan/UnitPrograms.h"

#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

namespace megac::cuda {

using runtime::StepStats;
using runtime::Trainer;

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

bool cudaDeviceAvailable(std::string *why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")";
    return false;
  }
  if (n == 0) {
    *why = "no CUDA device";
    return false;
  }
  return true;
}

namespace {

// Host-side state of an event that the CPU optimizer records: the number of
// records issued and the number completed. A wait targets the most recent
// record at the time it is issued, as cudaStreamWaitEvent does.
struct CpuEvent {
  int64_t issued = 0, done = 0;
};


// One UPDATE action, run by the optimizer thread in issue order.
struct UpdateJob {
  int32_t unit = 0, slot = 0;
  int32_t action = -1; // its index in the schedule (the measured timeline)
  std::vector<cudaEvent_t> gpuWaits;
  std::vector<int32_t> records; // CPU events
  float lr = 0;
  int64_t step = 0; // AdamW's step: the job may run on beside the next step (overlapping steps)
  int64_t pass = 0; // the micro-batch that issued it
  std::chrono::steady_clock::time_point passStart; // its start (the job's measured times)
  std::vector<float> *grads = nullptr; // --clip/--grad-accum: accumulate instead of updating
  bool stepWhenSummed = false;         // with grads: then step each parameter whose sum is complete
  // UPDATE_UNREAD_ROWS: the rows of the unit's token-indexed tables that
  // `rows` does not list, with a zero gradient (runtime/plan/TokenRows.h).
  // An UPDATE that steps: such a table's rows that `rows` lists.
  bool unreadRows = false;
  std::shared_ptr<const runtime::StepTokenRows> rows;
};

class CudaTrainer final : public Trainer {
public:
  explicit CudaTrainer(const plan::Plan &p) : Trainer(p) {}
  ~CudaTrainer() override;

  llvm::Error init(const CudaOptions &opts);
  llvm::Expected<StepStats> step(const std::vector<std::pair<Tensor, Tensor>> &microBatches, float lr) override;
  llvm::Expected<double> evalLoss(const Tensor &tokens, const Tensor &targets) override;
  llvm::Expected<double> forwardBackward(const Tensor &tokens, const Tensor &targets, float lossScale,
                                         std::vector<float> *grads, float lr) override;
  int microBatchesPerPass() const override { return M_; }
  llvm::Expected<std::vector<double>> forwardBackwardPass(const std::vector<std::pair<Tensor, Tensor>> &microBatches,
                                                          const std::vector<float> &lossScales,
                                                          std::vector<float> *grads, float lr,
                                                          bool stepWhenSummed = false) override;
  llvm::Expected<std::vector<double>> evalLosses(const std::vector<std::pair<Tensor, Tensor>> &batches) override;
  const char *device() const override { return "cuda"; }
  bool runsSchedule() const override { return true; }
  std::string arithmetic() const override { return plan_.compute(); }
  void report(llvm::raw_ostream &os) const override {
    if (timer_) timer_->print(os, timedSteps_);
  }
  // With overlapping steps, the last step's host AdamW ends first.
  std::vector<std::pair<double, double>> lastActionTimes() override;

protected:
  void syncHostState(bool callerWrites) override;

private:
  // Runs the schedule for one pass of its micro-batches (forward only when
  // !backward; a forward-only pass may be given fewer: the rest repeat the
  // last one's data, their losses dropped). Each micro-batch's loss.
  llvm::Error runPass(const std::vector<std::pair<Tensor, Tensor>> &microBatches, bool backward,
                      const std::vector<float> &lossScales, float lr, std::vector<float> *grads,
                      std::vector<double> &losses, double laneBusy[4], bool stepWhenSummed = false);
  uint8_t *region(plan::DeviceRegion::Kind kind, int32_t index, int64_t atLeast, llvm::Error &e, int microBatch = 0);
  // An activation's bytes; for a BACKWARD (`backward`), an offloaded
  // checkpoint's LOADED_CHECKPOINT region.
  llvm::Expected<void *> activationBuffer(int32_t act, int microBatch, bool backward = false);
  llvm::Expected<void *> activationGradBuffer(int32_t act, int microBatch);
  cudaStream_t streamOf(plan::StreamAction::Stream s) const;
  void optimizerLoop();
  void runUpdate(const UpdateJob &job);
  void waitCpuEvent(int32_t e);
  llvm::Error drainOptimizer();
  // The resident units' weights and moments: host -> GPU, and back.
  llvm::Error copyResident(bool toDevice);
  // Where a FORWARD or BACKWARD finds its unit's weights: its slot, or its RESIDENT region.
  uint8_t *unitWeights(const plan::StreamAction &a, const plan::WeightLayout &lay, llvm::Error &e);
  // AdamW on the GPU (compute stream) from the grad slot, for a unit whose
  // weights and moments are there: a resident unit's RESIDENT region, or an
  // adamw_on_gpu unit's weight slot and MOMENT_SLOT. With `grads` the
  // gradients are added to them on the host instead.
  llvm::Error gpuUpdate(int32_t unit, int32_t gradSlot, uint8_t *weights, uint8_t *m, uint8_t *v, float lr,
                        std::vector<float> *grads);
  // An adamw_on_gpu unit's moments host -> MOMENT_SLOT, or its weights and
  // moments slots -> host (WRITEBACK).
  llvm::Error moveSlotState(const plan::StreamAction &a, bool toDevice);

  const plan::StreamSchedule *sched_ = nullptr;
  std::vector<GpuProgram> forward_, backward_;
  std::map<size_t, GpuProgram> forwardKeep_, backwardKept_; // by template, where present
  std::vector<plan::SavedLayout> saved_;                     // by template (empty without keep programs)
  std::vector<plan::WeightLayout> layouts_;
  std::vector<int64_t> hostBlock_; // per unit: element offset of its weights as one host block, or -1
  std::vector<int64_t> hostSpan_;  // per unit: bytes from its first parameter's start to its last one's end
  std::vector<uint8_t *> resident_; // per unit: its RESIDENT region, or null where it streams
  bool anyResident_ = false;
  // Which side holds the resident units' newest state: the host after
  // state() (the caller may write the arrays) or a step that updated on the
  // host; the GPU after a step that updated them there.
  bool hostNewer_ = true, deviceNewer_ = false;
  std::vector<float> residentGrads_; // --clip/--grad-accum: a resident unit's gradients, read back
  GpuContext gpu_;
  cudaStream_t h2d_ = nullptr, d2h_ = nullptr;
  uint8_t *device_ = nullptr;      // the plan's device allocation
  void *extraWorkspace_ = nullptr; // kernels' scratch beyond the plan's WORKSPACE region, if any
  uint8_t *workspace_ = nullptr;
  uint8_t *arena_ = nullptr;
  // Per micro-batch of the pass: the loss and its gradient seed.
  float *lossDev_ = nullptr, *seedDev_ = nullptr;
  float *lossHost_ = nullptr;
  int M_ = 1; // micro-batches per pass (StreamSchedule.micro_batches)
  double stepLanes_[4] = {0, 0, 0, 0}; // this step's passes' busy seconds per lane
  uint8_t *staging_ = nullptr; // pinned: every grad slot's bytes (plan::stagingOffset)
  uint8_t *hostCheckpoints_ = nullptr; // pinned: the offloaded checkpoints (pinned_checkpoint_bytes)
  std::set<std::pair<int, int>> loadedCheckpoints_; // (activation, micro-batch) that a LOAD_CHECKPOINT brings back
  // The gradients' NaN/Inf check on the GPU (FiniteCheckKernels.h): per unit
  // the first bad (parameter, element), and the micro-batch's poison flag,
  // which each OFFLOAD copies beside its gradients for the host's AdamW and
  // the resident units' AdamW kernels read.
  bool checkFinite_ = true;
  unsigned long long *firstBadDev_ = nullptr;
  int *poisonDev_ = nullptr;
  int *verdictDev_ = nullptr;  // per grad slot: the flag right after its unit's check (compute stream order)
  int *poisonHost_ = nullptr; // pinned, per staging slot: the verdict, beside the gradients
  std::vector<std::string> gpuUpdated_; // units whose AdamW ran on the GPU this micro-batch, in order
  // The micro-batch's check (copies its records back): success, or the
  // NonFiniteError naming the first bad unit and the units updated before it.
  llvm::Error checkNonFinite();
  bool paramsPinned_ = false, momentsPinned_ = false, bf16Pinned_ = false;
  std::map<std::tuple<int, int, int>, const plan::DeviceRegion *> regions_; // (kind, index, micro-batch)
  std::vector<cudaEvent_t> events_;
  std::vector<bool> cpuRecorded_; // recorded by an UPDATE
  std::vector<CpuEvent> cpuEvents_;
  std::vector<cudaEvent_t> timing_; // start/end per action
  cudaEvent_t passStart_ = nullptr; // recorded as a micro-batch's actions start (the compute stream idle)
  std::chrono::steady_clock::time_point passStartHost_;
  std::vector<std::pair<double, double>> actionTimes_; // the last backward micro-batch's (lastActionTimes)
  // The CPU UPDATEs' times of the micro-batches in flight and the last
  // backward one's, by micro-batch (a job may end during the next one).
  std::map<int64_t, std::vector<std::pair<double, double>>> cpuTimes_;
  int64_t pass_ = 0, lastBackwardPass_ = -1; // micro-batches run; the last with its backward
  std::vector<float> stepGrads_;
  std::vector<bool> gradWritten_; // per (activation, micro-batch), this pass

  // Tied parameters: summed over their units until the last contribution.
  std::vector<int> pending_;
  std::vector<std::vector<float>> partial_;

  std::thread optimizer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<UpdateJob> jobs_;
  bool stop_ = false;
  int64_t jobsQueued_ = 0, jobsDone_ = 0;
  double cpuBusy_ = 0;
  std::string optimizerError_;
  std::vector<std::string> updatedThisStep_; // streamed units whose host AdamW ran this micro-batch (pass_)
  std::vector<std::string> unreadRowsStepped_; // units whose tables' unread rows stepped early this micro-batch
  std::unique_ptr<OpTimer> timer_; // --op-profile
  int64_t timedSteps_ = 0;
};

CudaTrainer::~CudaTrainer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (optimizer_.joinable()) optimizer_.join();
  if (gpu_.stream) cudaStreamSynchronize(gpu_.stream);
  if (h2d_) cudaStreamSynchronize(h2d_);
  if (d2h_) cudaStreamSynchronize(d2h_);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  for (cudaEvent_t e : timing_) cudaEventDestroy(e);
  if (passStart_) cudaEventDestroy(passStart_);
  if (paramsPinned_) cudaHostUnregister(state_.params.data());
  if (bf16Pinned_) cudaHostUnregister(bf16Weights_.data());
  if (momentsPinned_) {
    cudaHostUnregister(state_.m.data());
    cudaHostUnregister(state_.v.data());
  }
  cudaFreeHost(staging_);
  cudaFreeHost(hostCheckpoints_);
  cudaFreeHost(lossHost_);
  cudaFreeHost(poisonHost_);
  cudaFree(firstBadDev_);
  cudaFree(device_);
  cudaFree(extraWorkspace_);
  cudaFree(lossDev_);
  if (gpu_.lt) cublasLtDestroy(gpu_.lt);
  destroyDnnHandle(gpu_);
  if (gpu_.stream) cudaStreamDestroy(gpu_.stream);
  if (h2d_) cudaStreamDestroy(h2d_);
  if (d2h_) cudaStreamDestroy(d2h_);
}

uint8_t *CudaTrainer::region(plan::DeviceRegion::Kind kind, int32_t index, int64_t atLeast, llvm::Error &e,
                             int microBatch) {
  auto it = regions_.find({int(kind), index, microBatch});
  if (it == regions_.end()) {
    e = err("the plan's device layout has no " + plan::DeviceRegion::Kind_Name(kind) + " region " +
            llvm::Twine(index) + (microBatch ? " of micro-batch " + llvm::Twine(microBatch) : llvm::Twine()));
    return nullptr;
  }
  if (it->second->bytes() < atLeast) {
    e = err("the plan's " + plan::DeviceRegion::Kind_Name(kind) + " region " + llvm::Twine(index) + " holds " +
            llvm::Twine(it->second->bytes()) + " bytes; it needs " + llvm::Twine(atLeast));
    return nullptr;
  }
  return device_ + it->second->offset();
}

static int64_t activationBytes(const plan::Activation &a) {
  int64_t n = dtypeSize(DType(int(a.type().dtype())));
  for (int64_t d : a.type().shape()) n *= d;
  return n;
}

llvm::Expected<void *> CudaTrainer::activationBuffer(int32_t act, int mb, bool backward) {
  const plan::Activation &a = plan_.activations(act);
  if (a.kind() == plan::Activation::LOSS) return lossDev_ + mb;
  const auto kind = plan::activationRegion(a, backward && loadedCheckpoints_.count({act, mb}));
  llvm::Error e = llvm::Error::success();
  uint8_t *p = region(kind, act, activationBytes(a), e, mb);
  if (e) return std::move(e);
  return p;
}

llvm::Expected<void *> CudaTrainer::activationGradBuffer(int32_t act, int mb) {
  const plan::Activation &a = plan_.activations(act);
  if (a.kind() == plan::Activation::LOSS) return seedDev_ + mb;
  llvm::Error e = llvm::Error::success();
  uint8_t *p = region(plan::DeviceRegion::ACTIVATION_GRAD, act, activationBytes(a), e, mb);
  if (e) return std::move(e);
  return p;
}

cudaStream_t CudaTrainer::streamOf(plan::StreamAction::Stream s) const {
  switch (s) {
  case plan::StreamAction::H2D: return h2d_;
  case plan::StreamAction::D2H: return d2h_;
  default: return gpu_.stream;
  }
}

llvm::Error CudaTrainer::init(const CudaOptions &opts) {
  if (auto e = initHostState()) return e;
  if (!plan_.has_schedule() || plan_.schedule().actions_size() == 0)
    return err("the plan has no GPU schedule (compiled by an older megac?): recompile it with megac compile");
  sched_ = &plan_.schedule();
  const plan::StreamSchedule &s = *sched_;
  auto mode = parseComputeMode(plan_.compute());
  if (!mode) return err("plan compute mode: " + llvm::toString(mode.takeError()));
  gpu_.mode = *mode;

  // Activations used by several units would need their gradients summed on the GPU.
  std::vector<int> consumers(size_t(plan_.activations_size()), 0);
  for (const plan::Unit &u : plan_.units())
    for (int32_t a : u.activation_inputs()) ++consumers[size_t(a)];
  for (int a = 0; a < plan_.activations_size(); ++a)
    if (consumers[size_t(a)] > 1 && plan_.activations(a).kind() == plan::Activation::INTERMEDIATE)
      return err("activation '" + plan_.activations(a).name() + "' is used by " + llvm::Twine(consumers[size_t(a)]) +
                 " units; the CUDA runtime does not sum activation gradients across units yet");

  MEGAC_CUDA_TRY(cudaSetDevice(opts.device));
  cudaDeviceProp prop;
  MEGAC_CUDA_TRY(cudaGetDeviceProperties(&prop, opts.device));
  MEGAC_CUDA_TRY(cudaStreamCreateWithFlags(&gpu_.stream, cudaStreamNonBlocking));
  MEGAC_CUDA_TRY(cudaStreamCreateWithFlags(&h2d_, cudaStreamNonBlocking));
  MEGAC_CUDA_TRY(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking));
  MEGAC_CUBLAS_TRY(cublasLtCreate(&gpu_.lt));
  if (std::string why; gpu_.mode == ComputeMode::BF16 && !createDnnHandle(gpu_, &why))
    llvm::errs() << "megac: warning: " << why << "; attention runs without cuDNN\n";
  if (opts.opProfile) {
    timer_ = std::make_unique<OpTimer>();
    gpu_.timer = timer_.get();
  }

  size_t freeB = 0, totalB = 0;
  MEGAC_CUDA_TRY(cudaMemGetInfo(&freeB, &totalB));
  if (s.device_bytes() > int64_t(freeB))
    return err("the plan needs " + llvm::Twine(s.device_bytes()) + " bytes of GPU memory; " + prop.name + " has " +
               llvm::Twine(int64_t(freeB)) + " free: recompile with --gpu-mem " +
               std::to_string(int64_t(freeB >> 30)));
  MEGAC_CUDA_TRY(cudaMalloc(reinterpret_cast<void **>(&device_), size_t(std::max<int64_t>(s.device_bytes(), 256))));
  for (const plan::DeviceRegion &r : s.regions()) {
    if (!plan::blockWithin(r.offset(), r.bytes(), s.device_bytes()))
      return err("the plan's " + plan::DeviceRegion::Kind_Name(r.kind()) + " region " + llvm::Twine(r.index()) +
                 " lies outside its device allocation");
    regions_[{int(r.kind()), r.index(), r.micro_batch()}] = &r;
  }
  if (auto e = plan::checkPassMicroBatches(s)) return e;
  M_ = plan::passMicroBatches(s);
  // bf16 copies of the weight slots: each PREFETCH fills its slot's, the products read it.
  gpu_.weightCopies.clear();
  if (s.weight_copy_bytes() > 0) {
    if (gpu_.mode != ComputeMode::BF16)
      return err("the plan has bf16 copies of its weight slots but computes in " + plan_.compute());
    if (s.weight_copy_bytes() < plan::weightCopyBytes(s.weight_slot_bytes()))
      return err("the plan's bf16 weight copies are smaller than half its weight slots");
    for (int k = 0; k < s.weight_slots(); ++k) {
      llvm::Error e = llvm::Error::success();
      uint8_t *slot = region(plan::DeviceRegion::WEIGHT_SLOT, k, s.weight_slot_bytes(), e);
      if (e) return e;
      uint8_t *copy = region(plan::DeviceRegion::WEIGHT_COPY, k, s.weight_copy_bytes(), e);
      if (e) return e;
      gpu_.weightCopies.push_back({reinterpret_cast<const float *>(slot), s.weight_slot_bytes() / 4, copy});
    }
  }
  // Checkpoint offload: the host's copies, pinned, and which checkpoints come back.
  if (auto e = plan::checkCheckpointCopies(plan_)) return e;
  loadedCheckpoints_ = plan::loadedCheckpoints(s);
  if (s.pinned_checkpoint_bytes() > 0)
    MEGAC_CUDA_TRY(cudaMallocHost(reinterpret_cast<void **>(&hostCheckpoints_), size_t(s.pinned_checkpoint_bytes())));
  // Each micro-batch's loss, then its seed, 256-byte aligned apart.
  const size_t lossFloats = size_t(M_ + 63) / 64 * 64;
  MEGAC_CUDA_TRY(cudaMalloc(reinterpret_cast<void **>(&lossDev_), 2 * lossFloats * 4));
  seedDev_ = lossDev_ + lossFloats;
  MEGAC_CUDA_TRY(cudaMallocHost(reinterpret_cast<void **>(&lossHost_), lossFloats * 4));
  checkFinite_ = !plan_.optimizer().no_finite_check();
  // The check's records: a 64-bit word per unit, then the poison flag.
  MEGAC_CUDA_TRY(cudaMalloc(reinterpret_cast<void **>(&firstBadDev_),
                            size_t(plan_.units_size()) * 8 + size_t(1 + std::max(1, s.grad_slots())) * 4));
  poisonDev_ = reinterpret_cast<int *>(firstBadDev_ + plan_.units_size());
  verdictDev_ = poisonDev_ + 1;
  MEGAC_CUDA_TRY(cudaMallocHost(reinterpret_cast<void **>(&poisonHost_), size_t(std::max(1, s.grad_slots())) * 4));

  // Programs, their constants, the arena and the kernels' scratch. The
  // fused attention's scratch leaves out its residue where the stash, sized
  // by the plan, holds it: its size is known before its address.
  gpu_.attentionStashBytes = size_t(plan::alignUp(plan::attentionStashBytes(plan_), 256));
  int64_t constBytes = 0, arenaNeed = 0;
  size_t workNeed = 0;
  for (const plan::Template &tp : plan_.templates()) {
    auto f = GpuProgram::prepare(tp.forward(), "template '" + tp.name() + "' forward", gpu_);
    if (!f) return f.takeError();
    auto b = GpuProgram::prepare(tp.backward(), "template '" + tp.name() + "' backward", gpu_);
    if (!b) return b.takeError();
    std::vector<GpuProgram *> programs{&*f, &*b};
    std::optional<GpuProgram> fk, bk;
    if (plan::hasKeepPrograms(tp)) {
      auto f2 = GpuProgram::prepare(tp.forward_keep(), "template '" + tp.name() + "' forward_keep", gpu_);
      if (!f2) return f2.takeError();
      auto b2 = GpuProgram::prepare(tp.backward_kept(), "template '" + tp.name() + "' backward_kept", gpu_);
      if (!b2) return b2.takeError();
      fk = std::move(*f2);
      bk = std::move(*b2);
      programs.push_back(&*fk);
      programs.push_back(&*bk);
    }
    for (GpuProgram *g : programs) {
      constBytes += g->constantBytes();
      arenaNeed = std::max(arenaNeed, g->arenaBytes());
      workNeed = std::max(workNeed, g->workspaceBytes());
    }
    forward_.push_back(std::move(*f));
    backward_.push_back(std::move(*b));
    saved_.push_back(fk ? plan::savedLayout(tp) : plan::SavedLayout{});
    if (fk) {
      forwardKeep_.emplace(forward_.size() - 1, std::move(*fk));
      backwardKept_.emplace(backward_.size() - 1, std::move(*bk));
    }
  }
  for (const plan::Unit &u : plan_.units())
    if (u.keep_activations() && !forwardKeep_.count(size_t(u.template_id())))
      return err("unit '" + u.name() + "' keeps its activations, but its template has no keep programs");
  llvm::Error e = llvm::Error::success();
  plan::ConstantsLayout cl = plan::constantsLayout(plan_);
  if (cl.bytes < constBytes) return err("the plan's constants layout is smaller than its constants");
  uint8_t *consts = cl.bytes ? region(plan::DeviceRegion::CONSTANTS, 0, cl.bytes, e) : nullptr;
  if (e) return e;
  for (size_t t = 0; t < forward_.size(); ++t) {
    if (auto e2 = forward_[t].bindConstants(consts, cl.forward[t], gpu_.stream)) return e2;
    if (auto e2 = backward_[t].bindConstants(consts, cl.backward[t], gpu_.stream)) return e2;
    if (forwardKeep_.count(t)) {
      if (auto e2 = forwardKeep_.at(t).bindConstants(consts, cl.forwardKeep[t], gpu_.stream)) return e2;
      if (auto e2 = backwardKept_.at(t).bindConstants(consts, cl.backwardKept[t], gpu_.stream)) return e2;
    }
  }
  arena_ = arenaNeed ? region(plan::DeviceRegion::ARENA, 0, arenaNeed, e) : device_;
  if (e) return e;
  // The WORKSPACE region: the kernels' scratch, the attention stash, the
  // bf16 pack cache, then cuBLASLt's at its end.
  auto ws = regions_.find({int(plan::DeviceRegion::WORKSPACE), 0, 0});
  int64_t have = ws == regions_.end() ? 0 : ws->second->bytes();
  const size_t scratch = size_t(plan::alignUp(int64_t(workNeed), 256)),
               stash = size_t(plan::alignUp(plan::attentionStashBytes(plan_), 256)),
               packCache = gpu_.mode == ComputeMode::BF16 ? size_t(plan_.schedule().pack_cache_bytes()) : 0;
  const size_t need = scratch + stash + packCache + size_t(plan::kGemmWorkspaceBytes);
  if (have >= int64_t(need)) {
    workspace_ = device_ + ws->second->offset();
  } else {
    MEGAC_CUDA_TRY(cudaMalloc(&extraWorkspace_, need));
    workspace_ = static_cast<uint8_t *>(extraWorkspace_);
    have = int64_t(need);
    llvm::errs() << "megac: warning: the kernels need " << need << " bytes of scratch; the plan reserved "
                 << (ws == regions_.end() ? 0 : ws->second->bytes())
                 << " (allocated separately: the GPU peak is that much above the plan's)\n";
  }
  gpu_.attentionStash = stash ? workspace_ + scratch : nullptr;
  gpu_.attentionStashBytes = stash;
  gpu_.packCache.base = packCache ? workspace_ + scratch + stash : nullptr;
  gpu_.packCache.bytes = packCache;
  gpu_.gemmWorkspace = workspace_ + have - plan::kGemmWorkspaceBytes;
  gpu_.gemmWorkspaceBytes = size_t(plan::kGemmWorkspaceBytes);

  // Weight layouts, host staging and the pinned master weights.
  for (int u = 0; u < plan_.units_size(); ++u) {
    layouts_.push_back(plan::unitWeightLayout(plan_, u));
    // Codegen lays each unit's parameters out on the host as in its slot: one DMA.
    const plan::Unit &unit = plan_.units(u);
    int64_t block = unit.parameters_size() ? plan_.parameters(unit.parameters(0)).host_offset() : -1;
    for (int k = 0; k < unit.parameters_size() && block >= 0; ++k)
      if ((plan_.parameters(unit.parameters(k)).host_offset() - block) * 4 != layouts_.back().offsets[size_t(k)])
        block = -1;
    if (block >= 0 && (block * 4 + layouts_.back().bytes) > hostElements_ * 4) block = -1;
    hostBlock_.push_back(block);
    int64_t span = 0;
    for (int k = 0; k < unit.parameters_size(); ++k)
      span = std::max(span, layouts_.back().offsets[size_t(k)] + plan_.parameters(unit.parameters(k)).numel() * 4);
    hostSpan_.push_back(span);
    const bool streams = !unit.resident();
    if ((streams && layouts_.back().bytes > s.weight_slot_bytes()) || layouts_.back().bytes > s.grad_slot_bytes())
      return err("unit '" + plan_.units(u).name() + "' needs " + llvm::Twine(layouts_.back().bytes) +
                 " bytes per slot; the plan's slots hold " + llvm::Twine(streams ? s.weight_slot_bytes() : s.grad_slot_bytes()));
  }
  resident_.assign(size_t(plan_.units_size()), nullptr);
  for (int u = 0; u < plan_.units_size(); ++u) {
    const plan::Unit &unit = plan_.units(u);
    if (!unit.resident()) continue;
    if (!plan::canBeResident(plan_, u))
      return err("unit '" + unit.name() + "' is resident, but it shares a parameter with another unit or has none: "
                 "recompile with a smaller --resident-units");
    resident_[size_t(u)] = region(plan::DeviceRegion::RESIDENT, u, plan::residentLayout(plan_, u).bytes, e);
    if (e) return e;
    anyResident_ = true;
  }
  if (s.grad_slots() > 0)
    MEGAC_CUDA_TRY(cudaMallocHost(reinterpret_cast<void **>(&staging_), size_t(plan::stagingOffset(s, s.grad_slots()))));
  if (!state_.params.empty()) {
    MEGAC_CUDA_TRY(cudaHostRegister(state_.params.data(), state_.params.size() * 4, cudaHostRegisterDefault));
    paramsPinned_ = true;
  }
  // Weights streamed as bf16: their host copies, pinned, copied into the slots' bf16 copies.
  if (!bf16Weights_.empty()) {
    if (s.weight_copy_bytes() <= 0) return err("the plan streams weights as bf16 but has no bf16 weight copies");
    MEGAC_CUDA_TRY(cudaHostRegister(bf16Weights_.data(), bf16Weights_.size() * 2, cudaHostRegisterDefault));
    bf16Pinned_ = true;
  }
  // Units whose AdamW runs on the GPU while they stream copy their moments both ways.
  if (plan::anyAdamwOnGpu(plan_) && !state_.m.empty()) {
    MEGAC_CUDA_TRY(cudaHostRegister(state_.m.data(), state_.m.size() * 4, cudaHostRegisterDefault));
    if (cudaError_t e = cudaHostRegister(state_.v.data(), state_.v.size() * 4, cudaHostRegisterDefault); e != cudaSuccess) {
      cudaHostUnregister(state_.m.data());
      return err(llvm::Twine("pinning the AdamW moments: ") + cudaGetErrorString(e));
    }
    momentsPinned_ = true;
  }

  // One CUDA event per schedule event; those an UPDATE records live on the host.
  events_.resize(size_t(s.events_size()));
  cpuRecorded_.assign(size_t(s.events_size()), false);
  cpuEvents_.assign(size_t(s.events_size()), {});
  for (auto &ev : events_) MEGAC_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  for (const plan::StreamAction &a : s.actions())
    for (int32_t r : a.records()) {
      if (r < 0 || r >= s.events_size()) return err("the plan's schedule records an event that does not exist");
      if (a.stream() == plan::StreamAction::CPU) cpuRecorded_[size_t(r)] = true;
    }
  timing_.resize(size_t(2 * s.actions_size()));
  for (auto &ev : timing_) MEGAC_CUDA_TRY(cudaEventCreate(&ev));
  MEGAC_CUDA_TRY(cudaEventCreate(&passStart_));
  MEGAC_CUDA_TRY(cudaStreamSynchronize(gpu_.stream));

  pending_.assign(size_t(plan_.parameters_size()), 0);
  partial_.resize(size_t(plan_.parameters_size()));
  optimizer_ = std::thread([this] { optimizerLoop(); });
  if (opts.verbose) {
    int residentUnits = 0;
    int64_t residentBytes = 0;
    for (int u = 0; u < plan_.units_size(); ++u)
      if (resident_[size_t(u)]) ++residentUnits, residentBytes += plan::residentLayout(plan_, u).bytes;
    llvm::outs() << "device: " << prop.name << ", " << llvm::format("%.1f", double(s.device_bytes()) / (1ull << 30))
                 << " GiB of its " << llvm::format("%.1f", double(totalB) / (1ull << 30)) << " GiB planned ("
                 << s.weight_slots() << " weight slots of " << llvm::format("%.2f", s.weight_slot_bytes() / 1048576.0)
                 << " MiB";
    if (residentUnits)
      llvm::outs() << "; " << residentUnits << (residentUnits == 1 ? " unit" : " units") << " resident, "
                   << llvm::format("%.2f", double(residentBytes) / (1ull << 30)) << " GiB";
    int onGpu = 0;
    for (const plan::Unit &u : plan_.units()) onGpu += plan::adamwOnGpu(u);
    if (onGpu) llvm::outs() << "; " << onGpu << " streamed " << (onGpu == 1 ? "unit steps" : "units step") << " on the GPU";
    llvm::outs() << "), compute " << computeModeName(gpu_.mode) << "\n";
  }
  return llvm::Error::success();
}

void CudaTrainer::optimizerLoop() {
  for (;;) {
    UpdateJob job;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    bool ok = true;
    for (cudaEvent_t ev : job.gpuWaits) {
      cudaError_t e = cudaEventSynchronize(ev);
      if (e != cudaSuccess) {
        std::lock_guard<std::mutex> l(mu_);
        optimizerError_ = std::string("optimizer: waiting for a gradient copy: ") + cudaGetErrorString(e);
        ok = false;
      }
    }
    auto t0 = std::chrono::steady_clock::now(); // busy from here: the wait for the gradients is idle time
    if (ok) runUpdate(job);
    const auto t1 = std::chrono::steady_clock::now();
    double dt = std::chrono::duration<double>(t1 - t0).count();
    {
      std::lock_guard<std::mutex> l(mu_);
      cpuBusy_ += dt;
      auto times = cpuTimes_.find(job.pass);
      if (times != cpuTimes_.end() && job.action >= 0 && size_t(job.action) < times->second.size())
        times->second[size_t(job.action)] = {std::chrono::duration<double>(t0 - job.passStart).count(),
                                             std::chrono::duration<double>(t1 - job.passStart).count()};
      for (int32_t r : job.records) cpuEvents_[size_t(r)].done++;
      ++jobsDone_;
    }
    cv_.notify_all();
  }
}

void CudaTrainer::runUpdate(const UpdateJob &job) {
  const plan::Unit &unit = plan_.units(job.unit);
  const plan::WeightLayout &lay = layouts_[size_t(job.unit)];
  runtime::AdamWHyper h = hyper_;
  h.lr = job.lr;
  const int threads = std::max(1, cpu::numThreads() - 1);
  // The tables' unread rows, before the backward (no gradients yet, no verdict on them).
  if (job.unreadRows) {
    if (!stepUnreadRows(job.unit, job.rows.get(), job.lr, job.step, threads)) return;
    std::lock_guard<std::mutex> l(mu_);
    if (job.pass == pass_) unreadRowsStepped_.push_back(unit.name());
    return;
  }
  const uint8_t *base = staging_ + size_t(plan::stagingOffset(*sched_, job.slot));
  // The GPU checked the gradients of this unit and of every unit before it
  // in the step's backward order (FiniteCheckKernels.h); the OFFLOAD brought
  // the verdict along. Verdicts only grow along the step, and the jobs run in
  // backward order: once one is poisoned, so is every later one.
  if (checkFinite_ && poisonHost_[job.slot]) return;
  // Parameters of this unit alone are updated together: one split over the
  // threads for the whole unit. One core stays free for the thread that
  // launches the GPU's work.
  std::vector<runtime::AdamWSegment> segments;
  // A tied parameter (several units' shares): whether this is its last share of the step.
  auto lastShare = [&](int32_t pid, const plan::Parameter &p) {
    if (pending_[size_t(pid)] == 0) pending_[size_t(pid)] = p.units_size();
    return --pending_[size_t(pid)] == 0;
  };
  for (int k = 0; k < unit.parameters_size(); ++k) {
    int32_t pid = unit.parameters(k);
    const plan::Parameter &p = plan_.parameters(pid);
    const float *g = reinterpret_cast<const float *>(base + lay.offsets[size_t(k)]);
    const size_t off = size_t(p.host_offset());
    // A token-indexed table whose unread rows stepped early: the rows read.
    const std::vector<runtime::RowRun> *read = job.rows ? job.rows->readOf(pid) : nullptr;
    auto stepFrom = [&](const float *grad) {
      if (read)
        appendTableRows(segments, pid, *read, grad);
      else
        segments.push_back({state_.params.data() + off, grad, state_.m.data() + off, state_.v.data() + off, p.numel(),
                            p.decay(), bf16Of(pid)});
    };
    if (job.grads) {
      float *sum = job.grads->data() + p.host_offset();
      cpu::addInto(sum, g, p.numel());
      // The step's last pass: the parameter steps once its last unit's share is in.
      if (!job.stepWhenSummed || (p.units_size() > 1 && !lastShare(pid, p))) continue;
      stepFrom(sum);
      continue;
    }
    if (p.units_size() > 1) {
      auto &acc = partial_[size_t(pid)];
      if (acc.empty()) acc.assign(g, g + p.numel());
      else
        for (int64_t i = 0; i < p.numel(); ++i) acc[size_t(i)] += g[i];
      if (!lastShare(pid, p)) continue;
      updateParam(pid, acc.data(), job.lr, 1.0f, job.step);
      acc.clear();
      acc.shrink_to_fit();
    } else {
      stepFrom(g);
    }
  }
  if (!segments.empty()) runtime::adamwUpdateSegments(segments, job.step, h, 1.0f, threads);
  if (!job.grads || job.stepWhenSummed) {
    std::lock_guard<std::mutex> l(mu_);
    if (job.pass == pass_) updatedThisStep_.push_back(unit.name());
  }
}

void CudaTrainer::waitCpuEvent(int32_t e) {
  std::unique_lock<std::mutex> l(mu_);
  int64_t target = cpuEvents_[size_t(e)].issued;
  cv_.wait(l, [&] { return cpuEvents_[size_t(e)].done >= target || !optimizerError_.empty(); });
}

llvm::Error CudaTrainer::drainOptimizer() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return jobsDone_ == jobsQueued_; });
  if (!optimizerError_.empty()) return err(optimizerError_);
  return llvm::Error::success();
}

llvm::Error CudaTrainer::checkNonFinite() {
  int poison = 0;
  MEGAC_CUDA_TRY(cudaMemcpy(&poison, poisonDev_, 4, cudaMemcpyDeviceToHost));
  if (!poison) return llvm::Error::success();
  // The units updated before the bad one: every UPDATE of this micro-batch first.
  if (auto e = drainOptimizer()) return e;
  std::vector<unsigned long long> firstBad(size_t(plan_.units_size()));
  MEGAC_CUDA_TRY(cudaMemcpy(firstBad.data(), firstBadDev_, firstBad.size() * 8, cudaMemcpyDeviceToHost));
  // The first unit in the step's backward order whose gradients held one;
  // those before it were updated (resident: on the GPU, before the flag was
  // set; streamed: where the host's AdamW ran).
  std::vector<std::string> updated;
  std::lock_guard<std::mutex> l(mu_);
  for (const plan::StreamAction &a : sched_->actions()) {
    // A unit's last micro-batch of the pass: its check runs on the slot's sum.
    if (a.kind() != plan::StreamAction::BACKWARD || a.micro_batch() != M_ - 1) continue;
    const plan::Unit &unit = plan_.units(a.unit());
    const unsigned long long bad = firstBad[size_t(a.unit())];
    if (bad == kNoneBad) {
      const bool done = unit.resident() || unit.adamw_on_gpu()
                            ? std::count(gpuUpdated_.begin(), gpuUpdated_.end(), unit.name()) > 0
                                        : std::count(updatedThisStep_.begin(), updatedThisStep_.end(), unit.name()) > 0;
      if (done) updated.push_back(unit.name());
      continue;
    }
    const int k = int(bad >> kBadElementBits);
    const int64_t element = int64_t(bad & ((1ull << kBadElementBits) - 1));
    const std::string param = k < unit.parameters_size() ? plan_.parameters(unit.parameters(k)).name() : "?";
    return llvm::make_error<runtime::NonFiniteError>(
        runtime::nonFiniteGradientMessage(unit.name(), param, "NaN or Inf", element, "the check on the GPU"),
        runtime::updatedUnitList(updated, unreadRowsStepped_));
  }
  return llvm::make_error<runtime::NonFiniteError>("a gradient held NaN or Inf (the check on the GPU), in no unit's records",
                                                   "");
}

llvm::Error CudaTrainer::copyResident(bool toDevice) {
  for (int u = 0; u < plan_.units_size(); ++u) {
    if (!resident_[size_t(u)]) continue;
    const plan::Unit &unit = plan_.units(u);
    const plan::WeightLayout &lay = layouts_[size_t(u)];
    const plan::ResidentLayout rl = plan::residentLayout(plan_, u);
    for (auto [at, host] : {std::pair<int64_t, std::vector<float> *>{rl.weights, &state_.params},
                            {rl.m, &state_.m},
                            {rl.v, &state_.v}})
      for (int k = 0; k < unit.parameters_size(); ++k) {
        const plan::Parameter &p = plan_.parameters(unit.parameters(k));
        uint8_t *dev = resident_[size_t(u)] + at + lay.offsets[size_t(k)];
        float *h = host->data() + p.host_offset();
        const size_t bytes = size_t(p.numel()) * 4;
        if (toDevice) MEGAC_CUDA_TRY(cudaMemcpyAsync(dev, h, bytes, cudaMemcpyHostToDevice, h2d_));
        else MEGAC_CUDA_TRY(cudaMemcpyAsync(h, dev, bytes, cudaMemcpyDeviceToHost, h2d_));
      }
  }
  MEGAC_CUDA_TRY(cudaStreamSynchronize(h2d_));
  return llvm::Error::success();
}

void CudaTrainer::syncHostState(bool callerWrites) {
  // The host arrays are final once the last step's AdamW has run.
  if (auto e = drainOptimizer())
    llvm::report_fatal_error(llvm::Twine("megac: the last step's host AdamW: ") + llvm::toString(std::move(e)), false);
  if (!anyResident_) return;
  if (deviceNewer_) {
    if (auto e = copyResident(false))
      llvm::report_fatal_error(llvm::Twine("megac: copying the resident units' weights and AdamW moments from the GPU: ") +
                                   llvm::toString(std::move(e)),
                               false);
    deviceNewer_ = false;
  }
  hostNewer_ |= callerWrites;
}

uint8_t *CudaTrainer::unitWeights(const plan::StreamAction &a, const plan::WeightLayout &lay, llvm::Error &e) {
  if (uint8_t *r = resident_[size_t(a.unit())]) return r + plan::residentLayout(plan_, a.unit()).weights;
  return region(plan::DeviceRegion::WEIGHT_SLOT, a.weight_slot(), lay.bytes, e);
}

llvm::Error CudaTrainer::gpuUpdate(int32_t unit, int32_t gradSlot, uint8_t *weights, uint8_t *m, uint8_t *v, float lr,
                                   std::vector<float> *grads) {
  const plan::Unit &u = plan_.units(unit);
  const plan::WeightLayout &lay = layouts_[size_t(unit)];
  llvm::Error e = llvm::Error::success();
  uint8_t *g = region(plan::DeviceRegion::GRAD_SLOT, gradSlot, lay.bytes, e);
  if (e) return e;
  if (grads) { // read back and added on the host, as the staging path does
    residentGrads_.resize(size_t(lay.bytes / 4));
    MEGAC_CUDA_TRY(cudaMemcpyAsync(residentGrads_.data(), g, size_t(lay.bytes), cudaMemcpyDeviceToHost, gpu_.stream));
    MEGAC_CUDA_TRY(cudaStreamSynchronize(gpu_.stream));
    for (int k = 0; k < u.parameters_size(); ++k) {
      const plan::Parameter &p = plan_.parameters(u.parameters(k));
      cpu::addInto(grads->data() + p.host_offset(), residentGrads_.data() + lay.offsets[size_t(k)] / 4, p.numel());
    }
    return llvm::Error::success();
  }
  runtime::AdamWHyper h = hyper_;
  h.lr = lr;
  for (int k = 0; k < u.parameters_size(); ++k) {
    const plan::Parameter &p = plan_.parameters(u.parameters(k));
    const int64_t off = lay.offsets[size_t(k)];
    MEGAC_CUDA_TRY(launchAdamW(reinterpret_cast<float *>(weights + off), reinterpret_cast<const float *>(g + off),
                               reinterpret_cast<float *>(m + off), reinterpret_cast<float *>(v + off), p.numel(),
                               runtime::adamwCoefficients(state_.step, h, p.decay()), gpu_.stream,
                               checkFinite_ ? poisonDev_ : nullptr));
  }
  std::lock_guard<std::mutex> l(mu_);
  gpuUpdated_.push_back(u.name());
  return llvm::Error::success();
}

llvm::Error CudaTrainer::moveSlotState(const plan::StreamAction &a, bool toDevice) {
  const int u = a.unit();
  const plan::Unit &unit = plan_.units(u);
  if (!plan::adamwOnGpu(unit))
    return err("unit '" + unit.name() + "': the plan moves its AdamW moments, but its AdamW does not run on the GPU");
  const plan::WeightLayout &lay = layouts_[size_t(u)];
  const plan::MomentLayout ml = plan::momentLayout(plan_, u);
  llvm::Error e = llvm::Error::success();
  uint8_t *ms = region(plan::DeviceRegion::MOMENT_SLOT, a.weight_slot(), ml.bytes, e);
  if (e) return e;
  uint8_t *ws = toDevice ? nullptr : region(plan::DeviceRegion::WEIGHT_SLOT, a.weight_slot(), lay.bytes, e);
  if (e) return e;
  cudaStream_t st = streamOf(a.stream());
  std::vector<std::pair<uint8_t *, std::vector<float> *>> parts{{ms + ml.m, &state_.m}, {ms + ml.v, &state_.v}};
  if (!toDevice) parts.insert(parts.begin(), {ws, &state_.params});
  for (auto [dev, host] : parts) {
    // One copy where the unit's parameters lie on the host as in the slot;
    // the span ends at its last parameter, so that no neighbour is written.
    if (const int64_t block = hostBlock_[size_t(u)]; block >= 0) {
      float *h = host->data() + block;
      if (toDevice) MEGAC_CUDA_TRY(cudaMemcpyAsync(dev, h, size_t(hostSpan_[size_t(u)]), cudaMemcpyHostToDevice, st));
      else MEGAC_CUDA_TRY(cudaMemcpyAsync(h, dev, size_t(hostSpan_[size_t(u)]), cudaMemcpyDeviceToHost, st));
      continue;
    }
    for (int k = 0; k < unit.parameters_size(); ++k) {
      const plan::Parameter &p = plan_.parameters(unit.parameters(k));
      float *h = host->data() + p.host_offset();
      uint8_t *d = dev + lay.offsets[size_t(k)];
      if (toDevice) MEGAC_CUDA_TRY(cudaMemcpyAsync(d, h, size_t(p.numel()) * 4, cudaMemcpyHostToDevice, st));
      else MEGAC_CUDA_TRY(cudaMemcpyAsync(h, d, size_t(p.numel()) * 4, cudaMemcpyDeviceToHost, st));
    }
  }
  return llvm::Error::success();
}

llvm::Error CudaTrainer::runPass(const std::vector<std::pair<Tensor, Tensor>> &microBatches, bool backward,
                                 const std::vector<float> &lossScales, float lr, std::vector<float> *grads,
                                 std::vector<double> &losses, double laneBusy[4], bool stepWhenSummed) {
  const plan::StreamSchedule &s = *sched_;
  if (auto e = checkPassSize(microBatches.size(), backward, lossScales.size())) return e;
  // Data and the loss seeds, ahead of everything on the compute stream.
  std::vector<Tensor> staged; // alive until the copies are done
  for (int mb = 0; mb < M_; ++mb) {
    const auto &[tokens, targets] = microBatches[std::min(size_t(mb), microBatches.size() - 1)];
    for (int i = 0; i < plan_.activations_size(); ++i) {
      const plan::Activation &a = plan_.activations(i);
      if (a.kind() != plan::Activation::DATA_TOKENS && a.kind() != plan::Activation::DATA_TARGETS) continue;
      auto t = dataTensor(a, a.kind() == plan::Activation::DATA_TOKENS ? tokens : targets);
      if (!t) return t.takeError();
      auto buf = activationBuffer(i, mb);
      if (!buf) return buf.takeError();
      MEGAC_CUDA_TRY(cudaMemcpyAsync(*buf, t->raw(), t->nbytes(), cudaMemcpyHostToDevice, gpu_.stream));
      staged.push_back(std::move(*t));
    }
  }
  std::vector<float> seeds(lossScales);
  seeds.resize(size_t(M_), 0.0f);
  MEGAC_CUDA_TRY(cudaMemcpyAsync(seedDev_, seeds.data(), seeds.size() * 4, cudaMemcpyHostToDevice, gpu_.stream));
  MEGAC_CUDA_TRY(cudaStreamSynchronize(gpu_.stream)); // the host values above are stack/temporary memory
  if (anyResident_ && hostNewer_) {
    if (auto e = copyResident(true)) return e;
    hostNewer_ = false;
  }
  if (bf16Stale_) refreshBf16Weights(); // state() drained the host's AdamW
  {
    // An earlier step's host AdamW that failed (overlapping steps) fails this one.
    std::lock_guard<std::mutex> l(mu_);
    if (!optimizerError_.empty()) return err(optimizerError_);
  }

  gradWritten_.assign(size_t(plan_.activations_size()) * size_t(M_), false);
  if (backward && checkFinite_) {
    MEGAC_CUDA_TRY(cudaMemsetAsync(firstBadDev_, 0xff, size_t(plan_.units_size()) * 8, gpu_.stream));
    MEGAC_CUDA_TRY(cudaMemsetAsync(poisonDev_, 0, 4, gpu_.stream));
    std::lock_guard<std::mutex> l(mu_);
    gpuUpdated_.clear();
  }
  int lastAction = s.actions_size() - 1;
  if (!backward) {
    lastAction = -1;
    for (int i = 0; i < s.actions_size(); ++i)
      if (s.actions(i).kind() == plan::StreamAction::FORWARD) lastAction = i;
  }
  std::vector<bool> timed(size_t(s.actions_size()), false);
  // Every stream is idle here: the event and the host clock mark the same instant.
  MEGAC_CUDA_TRY(cudaEventRecord(passStart_, gpu_.stream));
  MEGAC_CUDA_TRY(cudaEventSynchronize(passStart_));
  {
    std::lock_guard<std::mutex> l(mu_);
    passStartHost_ = std::chrono::steady_clock::now();
    ++pass_;
    updatedThisStep_.clear();
    unreadRowsStepped_.clear();
    cpuTimes_[pass_].assign(size_t(s.actions_size()), {0.0, 0.0});
    // Keep the passes in flight and the last backward one's.
    for (auto it = cpuTimes_.begin(); it != cpuTimes_.end();)
      it = it->first < pass_ - 2 && it->first != lastBackwardPass_ ? cpuTimes_.erase(it) : std::next(it);
  }
  for (int i = 0; i <= lastAction; ++i) {
    const plan::StreamAction &a = s.actions(i);
    if (!backward && a.kind() != plan::StreamAction::PREFETCH && a.kind() != plan::StreamAction::FORWARD) continue;
    const bool onCpu = a.stream() == plan::StreamAction::CPU;
    cudaStream_t st = streamOf(a.stream());
    UpdateJob job;
    for (int32_t w : a.waits()) {
      if (w < 0 || w >= s.events_size()) return err("the plan's schedule waits for an event that does not exist");
      if (cpuRecorded_[size_t(w)]) {
        if (!onCpu) waitCpuEvent(w); // the host holds this GPU action back until the CPU is done
      } else if (onCpu) {
        job.gpuWaits.push_back(events_[size_t(w)]);
      } else {
        MEGAC_CUDA_TRY(cudaStreamWaitEvent(st, events_[size_t(w)], 0));
      }
    }
    if (a.unit() < 0 || a.unit() >= plan_.units_size()) return err("the plan's schedule names a unit that does not exist");
    const plan::Unit &unit = plan_.units(a.unit());
    const plan::WeightLayout &lay = layouts_[size_t(a.unit())];
    llvm::Error e = llvm::Error::success();
    // A CPU action's job: its unit, and the pass's numbers it steps with.
    auto cpuJob = [&] {
      job.unit = a.unit();
      job.action = i;
      job.lr = lr;
      job.step = state_.step;
      job.pass = pass_;
      job.passStart = passStartHost_;
    };
    if (!onCpu) {
      MEGAC_CUDA_TRY(cudaEventRecord(timing_[size_t(2 * i)], st));
      timed[size_t(i)] = true;
    }
    switch (a.kind()) {
    case plan::StreamAction::PREFETCH: {
      uint8_t *slot = region(plan::DeviceRegion::WEIGHT_SLOT, a.weight_slot(), lay.bytes, e);
      if (e) return e;
      uint8_t *copy = nullptr;
      if (s.weight_copy_bytes() > 0) {
        copy = region(plan::DeviceRegion::WEIGHT_COPY, a.weight_slot(), lay.bytes / 2, e);
        if (e) return e;
      }
      // Weights that stream as bf16 come as the host's bf16 copies, into the slot's copy.
      const bool anyBf16 = plan::unitBf16Elements(plan_, a.unit()) > 0;
      if (hostBlock_[size_t(a.unit())] >= 0 && !anyBf16) {
        MEGAC_CUDA_TRY(cudaMemcpyAsync(slot, state_.params.data() + hostBlock_[size_t(a.unit())], size_t(lay.bytes),
                                       cudaMemcpyHostToDevice, st));
      } else {
        for (int k = 0; k < unit.parameters_size(); ++k) {
          const plan::Parameter &p = plan_.parameters(unit.parameters(k));
          if (const uint16_t *b = bf16Of(unit.parameters(k)); b && copy)
            MEGAC_CUDA_TRY(cudaMemcpyAsync(copy + lay.offsets[size_t(k)] / 2, b, size_t(p.numel()) * 2,
                                           cudaMemcpyHostToDevice, st));
          else
            MEGAC_CUDA_TRY(cudaMemcpyAsync(slot + lay.offsets[size_t(k)], state_.params.data() + p.host_offset(),
                                           size_t(p.numel()) * 4, cudaMemcpyHostToDevice, st));
        }
      }
      // The slot's bf16 copy, parameter by parameter (the padding between
      // them is never written); a weight that came as bf16 the other way,
      // into the fp32 slot, for any reader that packs it again.
      if (copy)
        for (int k = 0; k < unit.parameters_size(); ++k) {
          float *w = reinterpret_cast<float *>(slot + lay.offsets[size_t(k)]);
          uint8_t *c = copy + lay.offsets[size_t(k)] / 2;
          const int64_t n = plan_.parameters(unit.parameters(k)).numel();
          if (auto e2 = bf16Of(unit.parameters(k)) ? unpackBf16On(st, w, c, n) : packBf16On(st, c, w, n)) return e2;
        }
      break;
    }
    case plan::StreamAction::FORWARD:
    case plan::StreamAction::BACKWARD: {
      const bool fwd = a.kind() == plan::StreamAction::FORWARD;
      const size_t tid = size_t(unit.template_id());
      const bool keep = unit.keep_activations();
      const GpuProgram &prog = keep ? (fwd ? forwardKeep_ : backwardKept_).at(tid) : (fwd ? forward_ : backward_)[tid];
      const plan::Template &tp = plan_.templates(unit.template_id());
      const int mb = a.micro_batch(); // init checked the range
      const bool lastMb = mb == M_ - 1;
      // A keeping unit's saved values: its FORWARD writes them, its BACKWARD reads them.
      std::vector<void *> savedPtrs;
      if (keep) {
        uint8_t *base = region(plan::DeviceRegion::SAVED, a.unit(), saved_[tid].bytes, e, mb);
        if (e) return e;
        for (int64_t off : saved_[tid].offsets) savedPtrs.push_back(base + off);
      }
      uint8_t *slot = unitWeights(a, lay, e);
      if (e) return e;
      std::vector<void *> args, results;
      uint8_t *gradSlot = nullptr; // BACKWARD: where the unit's parameter gradients go
      size_t addFrom = SIZE_MAX;   // a later micro-batch adds its parameter gradients to the slot's sum
      for (int32_t act : unit.activation_inputs()) {
        auto b = activationBuffer(act, mb, !fwd);
        if (!b) return b.takeError();
        args.push_back(*b);
      }
      for (int k = 0; k < unit.parameters_size(); ++k) args.push_back(slot + lay.offsets[size_t(k)]);
      if (fwd) {
        for (int32_t act : unit.activation_outputs()) {
          auto b = activationBuffer(act, mb);
          if (!b) return b.takeError();
          results.push_back(*b);
        }
        results.insert(results.end(), savedPtrs.begin(), savedPtrs.end());
      } else {
        for (int32_t act : unit.activation_outputs()) {
          auto b = activationGradBuffer(act, mb);
          if (!b) return b.takeError();
          // An output no later unit differentiates (the loss has its seed): zero gradient.
          if (!gradWritten_[size_t(act) * size_t(M_) + size_t(mb)] && plan_.activations(act).kind() != plan::Activation::LOSS)
            MEGAC_CUDA_TRY(cudaMemsetAsync(*b, 0, size_t(activationBytes(plan_.activations(act))), st));
          args.push_back(*b);
        }
        for (int k = 0; k < unit.activation_inputs_size(); ++k) {
          if (!tp.input_has_gradient(k)) continue;
          auto b = activationGradBuffer(unit.activation_inputs(k), mb);
          if (!b) return b.takeError();
          results.push_back(*b);
          gradWritten_[size_t(unit.activation_inputs(k)) * size_t(M_) + size_t(mb)] = true;
        }
        uint8_t *gslot = region(plan::DeviceRegion::GRAD_SLOT, a.grad_slot(), lay.bytes, e);
        if (e) return e;
        if (mb > 0) addFrom = results.size();
        for (int k = 0; k < unit.parameters_size(); ++k) results.push_back(gslot + lay.offsets[size_t(k)]);
        gradSlot = gslot;
        args.insert(args.end(), savedPtrs.begin(), savedPtrs.end());
      }
      if (auto e2 = prog.run(gpu_, arena_, workspace_, args, results, addFrom))
        return err("unit '" + unit.name() + "': " + llvm::toString(std::move(e2)));
      // The slot holds the unit's gradients once its last micro-batch has added to them.
      if (!fwd && lastMb) {
        if (injectNan_ && injectNan_->at(unit.name(), state_.step) && unit.parameters_size() > 0) {
          static const float nan = NAN;
          MEGAC_CUDA_TRY(cudaMemcpyAsync(gradSlot + lay.offsets[0], &nan, 4, cudaMemcpyHostToDevice, st));
        }
        // Before the gradients leave the slot (the OFFLOAD, or a resident unit's UPDATE, waits for this).
        for (int k = 0; checkFinite_ && k < unit.parameters_size(); ++k)
          MEGAC_CUDA_TRY(launchFindNonFinite(reinterpret_cast<const float *>(gradSlot + lay.offsets[size_t(k)]),
                                             plan_.parameters(unit.parameters(k)).numel(),
                                             static_cast<unsigned long long>(k) << kBadElementBits,
                                             firstBadDev_ + a.unit(), poisonDev_, st));
        // The verdict on this unit and every unit before it, whatever later units' checks find
        // (for every BACKWARD, so that no OFFLOAD carries an earlier micro-batch's).
        if (checkFinite_)
          MEGAC_CUDA_TRY(cudaMemcpyAsync(verdictDev_ + a.grad_slot(), poisonDev_, 4, cudaMemcpyDeviceToDevice, st));
      }
      if (fwd)
        for (int32_t act : unit.activation_outputs())
          if (plan_.activations(act).kind() == plan::Activation::LOSS)
            MEGAC_CUDA_TRY(cudaMemcpyAsync(lossHost_ + mb, lossDev_ + mb, 4, cudaMemcpyDeviceToHost, st));
      break;
    }
    case plan::StreamAction::OFFLOAD: {
      uint8_t *gslot = region(plan::DeviceRegion::GRAD_SLOT, a.grad_slot(), lay.bytes, e);
      if (e) return e;
      if (a.grad_slot() < 0 || a.grad_slot() >= s.grad_slots()) return err("OFFLOAD to a staging slot that does not exist");
      MEGAC_CUDA_TRY(cudaMemcpyAsync(staging_ + size_t(plan::stagingOffset(s, a.grad_slot())), gslot,
                                     size_t(lay.bytes), cudaMemcpyDeviceToHost, st));
      if (checkFinite_) // the verdict on this unit's gradients and every earlier unit's, beside them
        MEGAC_CUDA_TRY(cudaMemcpyAsync(poisonHost_ + a.grad_slot(), verdictDev_ + a.grad_slot(), 4,
                                       cudaMemcpyDeviceToHost, st));
      break;
    }
    case plan::StreamAction::UPDATE: {
      if (a.grad_slot() < 0 || a.grad_slot() >= s.grad_slots()) return err("UPDATE from a staging slot that does not exist");
      if (!onCpu) {
        uint8_t *w = nullptr, *m = nullptr, *v = nullptr;
        if (uint8_t *r = resident_[size_t(a.unit())]) {
          const plan::ResidentLayout rl = plan::residentLayout(plan_, a.unit());
          w = r + rl.weights, m = r + rl.m, v = r + rl.v;
        } else if (unit.adamw_on_gpu()) { // its weight slot and MOMENT_SLOT
          const plan::MomentLayout ml = plan::momentLayout(plan_, a.unit());
          w = region(plan::DeviceRegion::WEIGHT_SLOT, a.weight_slot(), lay.bytes, e);
          if (e) return e;
          uint8_t *ms = region(plan::DeviceRegion::MOMENT_SLOT, a.weight_slot(), ml.bytes, e);
          if (e) return e;
          m = ms + ml.m, v = ms + ml.v;
        } else {
          return err("unit '" + unit.name() + "' is updated on the GPU, but it is neither resident nor runs its AdamW there");
        }
        if (auto e2 = gpuUpdate(a.unit(), a.grad_slot(), w, m, v, lr, grads)) return e2;
        if (resident_[size_t(a.unit())] && !grads) deviceNewer_ = true;
        break;
      }
      cpuJob();
      job.slot = a.grad_slot();
      job.grads = grads;
      job.stepWhenSummed = grads && stepWhenSummed;
      if (!grads || stepWhenSummed) job.rows = stepRows_; // a table whose unread rows stepped early: the rest
      break;
    }
    case plan::StreamAction::UPDATE_UNREAD_ROWS: // init checked the unit
      if (grads && !stepWhenSummed) continue; // a pass that does not step
      cpuJob();
      job.unreadRows = true;
      job.rows = stepRows_;
      break;
    case plan::StreamAction::FETCH_MOMENTS:
    case plan::StreamAction::WRITEBACK:
      if (auto e2 = moveSlotState(a, a.kind() == plan::StreamAction::FETCH_MOMENTS)) return e2;
      break;
    case plan::StreamAction::SAVE_CHECKPOINT:
    case plan::StreamAction::LOAD_CHECKPOINT: { // init checked the activation and the host block
      const bool save = a.kind() == plan::StreamAction::SAVE_CHECKPOINT;
      const int64_t bytes = plan::checkpointCopyBytes(plan_, a);
      uint8_t *dev = region(save ? plan::DeviceRegion::CHECKPOINT : plan::DeviceRegion::LOADED_CHECKPOINT, a.activation(), bytes, e,
                            a.micro_batch());
      if (e) return e;
      uint8_t *host = hostCheckpoints_ + a.host_offset();
      MEGAC_CUDA_TRY(cudaMemcpyAsync(save ? static_cast<void *>(host) : dev, save ? static_cast<void *>(dev) : host, size_t(bytes),
                                     save ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, st));
      break;
    }
    default: return err("the plan's schedule has an action of unknown kind");
    }
    if (onCpu) {
      std::lock_guard<std::mutex> l(mu_);
      for (int32_t r : a.records()) {
        cpuEvents_[size_t(r)].issued++;
        job.records.push_back(r);
      }
      jobs_.push_back(std::move(job));
      ++jobsQueued_;
      cv_.notify_all();
    } else {
      MEGAC_CUDA_TRY(cudaEventRecord(timing_[size_t(2 * i + 1)], st));
      for (int32_t r : a.records()) MEGAC_CUDA_TRY(cudaEventRecord(events_[size_t(r)], st));
    }
  }
  for (cudaStream_t st : {h2d_, gpu_.stream, d2h_}) MEGAC_CUDA_TRY(cudaStreamSynchronize(st));
  // Overlapping steps: the micro-batch ends with the GPU idle; its host
  // AdamW runs on beside the next one, whose first copies of the units wait
  // for it. One that keeps its gradients, or runs no backward, ends with it.
  const bool carry = backward && !grads && s.overlap_steps();
  if (!carry)
    if (auto e = drainOptimizer()) return e;
  if (backward && checkFinite_)
    if (auto e = checkNonFinite()) return e;
  if (timer_)
    if (auto e = timer_->collect()) return e;
  losses.assign(microBatches.size(), 0.0);
  for (size_t k = 0; k < microBatches.size(); ++k) losses[k] = double(lossHost_[k]);
  std::vector<std::pair<double, double>> times(size_t(s.actions_size()), {0.0, 0.0});
  for (int i = 0; i < s.actions_size(); ++i) {
    if (!timed[size_t(i)]) continue;
    float ms = 0, from = 0, to = 0;
    MEGAC_CUDA_TRY(cudaEventElapsedTime(&ms, timing_[size_t(2 * i)], timing_[size_t(2 * i + 1)]));
    MEGAC_CUDA_TRY(cudaEventElapsedTime(&from, passStart_, timing_[size_t(2 * i)]));
    MEGAC_CUDA_TRY(cudaEventElapsedTime(&to, passStart_, timing_[size_t(2 * i + 1)]));
    times[size_t(i)] = {double(from) / 1000.0, double(to) / 1000.0};
    int lane = int(s.actions(i).stream());
    laneBusy[lane] = std::max(laneBusy[lane], 0.0) + double(ms) / 1000.0;
  }
  if (backward) {
    std::lock_guard<std::mutex> l(mu_);
    lastBackwardPass_ = pass_;
    actionTimes_ = std::move(times); // its CPU actions' times are filled in by lastActionTimes()
  }
  return llvm::Error::success();
}

std::vector<std::pair<double, double>> CudaTrainer::lastActionTimes() {
  if (auto e = drainOptimizer()) llvm::consumeError(std::move(e)); // the next step reports it
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::pair<double, double>> times = actionTimes_;
  auto it = cpuTimes_.find(lastBackwardPass_);
  for (size_t i = 0; it != cpuTimes_.end() && i < times.size() && i < it->second.size(); ++i)
    if (sched_->actions(int(i)).stream() == plan::StreamAction::CPU) times[i] = it->second[i];
  return times;
}

llvm::Expected<StepStats> CudaTrainer::step(const std::vector<std::pair<Tensor, Tensor>> &microBatches, float lr) {
  StepStats stats;
  const plan::Optimizer &o = plan_.optimizer();
  const bool keepGrads = keepsGradients(microBatches.size());
  auto weights = runtime::microBatchWeights(microBatches, plan_.ignore_index());
  if (!weights) return weights.takeError();
  ++state_.step;
  if (keepGrads) {
    // Zeros over the threads (8B parameters: 32 GB, seconds on one thread).
    if (stepGrads_.size() != size_t(hostElements_)) stepGrads_.assign(size_t(hostElements_), 0.0f);
    else
      cpu::parallelFor(hostElements_, 1 << 20, [&](int64_t begin, int64_t end) {
        std::memset(stepGrads_.data() + begin, 0, size_t(end - begin) * 4);
      });
    if (deviceNewer_) { // AdamW runs on the host for every unit this step
      if (auto e = copyResident(false)) {
        --state_.step;
        return std::move(e);
      }
      deviceNewer_ = false;
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    cpuBusy_ = 0;
  }
  for (double &b : stepLanes_) b = 0;
  // Without a clip, the last of several passes steps each parameter once its sum is in.
  bool stepped = false;
  auto loss = runPasses(microBatches, *weights, keepGrads ? &stepGrads_ : nullptr, lr, stepped);
  if (!loss) {
    --state_.step;
    return loss.takeError();
  }
  std::copy(std::begin(stepLanes_), std::end(stepLanes_), std::begin(stats.laneBusy));
  stats.loss = *loss;
  ++timedSteps_;
  if (keepGrads && !stepped) {
    float gradScale = 1.0f;
    if (o.clip() > 0) {
      // Over the whole host array (the gaps between units' blocks hold zeros),
      // split over the threads; the chunks' sums added in order, so that a
      // run is repeatable.
      std::map<int64_t, double> parts;
      std::mutex sumMu;
      cpu::parallelFor(int64_t(stepGrads_.size()), 1, [&](int64_t begin, int64_t end) {
        double part = 0;
        for (int64_t i = begin; i < end; ++i) part += double(stepGrads_[size_t(i)]) * double(stepGrads_[size_t(i)]);
        std::lock_guard<std::mutex> l(sumMu);
        parts[begin] = part;
      });
      double sq = 0;
      for (const auto &[begin, part] : parts) sq += part;
      stats.gradNorm = std::sqrt(sq);
      double coef = double(o.clip()) / (stats.gradNorm + 1e-6);
      if (coef < 1.0) gradScale = float(coef);
    }
    auto t0 = std::chrono::steady_clock::now();
    for (int p = 0; p < plan_.parameters_size(); ++p)
      updateParam(p, stepGrads_.data() + plan_.parameters(p).host_offset(), lr, gradScale);
    hostNewer_ = anyResident_;
    std::lock_guard<std::mutex> l(mu_);
    cpuBusy_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::lock_guard<std::mutex> l(mu_);
  stats.laneBusy[plan::StreamAction::CPU] = cpuBusy_;
  return stats;
}

llvm::Expected<double> CudaTrainer::evalLoss(const Tensor &tokens, const Tensor &targets) {
  auto losses = evalLosses({{tokens, targets}});
  if (!losses) return losses.takeError();
  return losses->front();
}

llvm::Expected<std::vector<double>> CudaTrainer::evalLosses(const std::vector<std::pair<Tensor, Tensor>> &batches) {
  double lanes[4] = {0, 0, 0, 0};
  return evalInPasses(batches, [&](const std::vector<std::pair<Tensor, Tensor>> &pass, std::vector<double> &losses) {
    return runPass(pass, false, {}, 0.0f, nullptr, losses, lanes);
  });
}

llvm::Expected<double> CudaTrainer::forwardBackward(const Tensor &tokens, const Tensor &targets, float lossScale,
                                                    std::vector<float> *grads, float lr) {
  return forwardBackwardAsPass(tokens, targets, lossScale, grads, lr);
}

// Its lanes' busy seconds add to stepLanes_ (step() reports them).
llvm::Expected<std::vector<double>> CudaTrainer::forwardBackwardPass(
    const std::vector<std::pair<Tensor, Tensor>> &microBatches, const std::vector<float> &lossScales,
    std::vector<float> *grads, float lr, bool stepWhenSummed) {
  if (grads && int64_t(grads->size()) < hostElements_) return err("forwardBackward: the gradient array is too small");
  std::vector<double> losses;
  if (auto e = runPass(microBatches, true, lossScales, lr, grads, losses, stepLanes_, stepWhenSummed)) return std::move(e);
  return losses;
}

} // namespace

llvm::Expected<std::unique_ptr<runtime::Trainer>> createCudaTrainer(const plan::Plan &plan, const CudaOptions &opts) {
  std::unique_ptr<CudaTrainer> t(new CudaTrainer(plan));
  if (auto e = t->init(opts)) return std::move(e);
  return std::unique_ptr<runtime::Trainer>(std::move(t));
}

} // namespace megac::cuda
