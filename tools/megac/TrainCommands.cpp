// megac compile MODEL.onnx --batch B --seq S [optimizer flags] -o model.plan
// megac run model.plan --data FILE --steps N [optimizer, data, checkpoint flags]
// megac train MODEL.onnx --batch B --seq S ... (compile and run in one)
#include "driver/Compile.h"
#include "codegen/GpuAdamwPolicy.h"
#include "codegen/CheckpointOffloadPolicy.h"
#include "codegen/MicroBatchPolicy.h"
#include "codegen/UpdateOrderPolicy.h"
#include "codegen/WeightSlotsPolicy.h"
#include "codegen/RecomputePolicy.h"
#include "codegen/ResidentPolicy.h"
#include "frontend/TensorProto.h"
#include "passes/AttentionMask.h"
#include "runtime/plan/HostBill.h"
#include "runtime/plan/StreamLayout.h"
#include "runtime/train/HostMemory.h"
#include "runtime/train/TrainLoop.h"
#include "runtime/weights/WeightFiles.h"
#include "tools/inspect/PlanTimeline.h"
#ifdef MEGAC_HAS_CUDA
#include "runtime/cuda/CudaTrainer.h"
#endif
#include "tools/megac/Driver.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>

namespace cl = llvm::cl;

namespace megac::driver {


// --- compile ---
static cl::opt<std::string> Model(cl::Positional, cl::desc("<model.onnx>"), cl::Required, cl::sub(compileCmd()),
                                  cl::sub(trainCmd()));
static cl::opt<std::string> PlanOut("o", cl::desc("Plan file to write"), cl::value_desc("model.plan"),
                                    cl::sub(compileCmd()));
static cl::opt<int64_t> IgnoreIndex("ignore-index", cl::desc("Target value the loss ignores (default -100)"),
                                    cl::init(-100), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<bool> NoFusedLoss("no-fused-loss",
                                 cl::desc("Keep the head's product and the loss apart (the fp32 [tokens, vocab] "
                                          "logits and their gradient exist whole): to compare, or as a fallback"),
                                 cl::sub(compileCmd()), cl::sub(trainCmd()));
// Memory budgets and the streaming schedule.
static cl::opt<double> GpuMem("gpu-mem", cl::desc("GPU memory the plan may use, in GiB (default: the profile's usable memory)"),
                              cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<double> HostMem("host-mem", cl::desc("Host memory the plan may use, in GiB (default: not checked)"),
                               cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> WeightSlots(
    "weight-slots",
    cl::desc("GPU weight slots K >= 2: prefetch runs K-1 units ahead of compute (auto: 2, or where streamed units "
             "step on the GPU, the fewest of 2-4 the cost model predicts within 0.5% of the fastest)"),
    cl::init("auto"), cl::value_desc("K|auto"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> RecomputeFlag(
    "recompute",
    cl::desc("Which units recompute their forward in the backward: all (default: every unit recomputes from its "
             "layer-boundary checkpoint; the least GPU memory) | auto (keep the activations of as many units as the "
             "GPU budget holds, recompute the rest; faster where the step is compute-bound) | none (every unit keeps "
             "its activations)"),
    cl::init("all"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> ResidentUnits(
    "resident-units",
    cl::desc("The first N units (in forward order, skipping tied ones) whose fp32 weights and AdamW moments stay on "
             "the GPU and step there, instead of streaming: the units the next step needs first are the last whose "
             "gradients arrive (0: every unit streams; auto: as many as the cost model says shorten the step, within "
             "the GPU budget)"),
    cl::init("auto"), cl::value_desc("N|auto"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<bool> Stats("stats", cl::desc("Print what the compile read and evaluated (attention masks)"),
                           cl::sub(compileCmd()));
static cl::opt<bool> LongestSeqFlag("longest-seq",
                                    cl::desc("Also report the longest seq that fits the GPU budget (and --host-mem) "
                                             "at batch 1 (short compiles estimate it; compiles as the flags ask close in on it to 1%)"),
                                    cl::sub(compileCmd()));
static cl::opt<std::string> GpuAdamwUnits(
    "gpu-adamw-units",
    cl::desc("The first N streamed units (in forward order, skipping tied ones) whose AdamW moments come to the GPU "
             "with their weights in the backward and step there, so that the host's AdamW of the units the next "
             "step needs first does not end the step (0: every streamed unit steps on the CPU; auto: the units the "
             "cost model predicts shorten the step by 3% or more, within the GPU budget; else none)"),
    cl::init("auto"), cl::value_desc("N|auto"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> OverlapSteps(
    "overlap-steps",
    cl::desc("on (default): a step ends when the GPU is done; the host's AdamW of its streamed units runs on beside "
             "the next step's forward, whose first copy of each unit waits for that unit's update. off: a step ends "
             "when every update has run"),
    cl::init("on"), cl::value_desc("on|off"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> UnreadRowsEarly(
    "unread-rows-early",
    cl::desc("on: the rows of an untied embedding table that no token of the step reads are stepped by the host's "
             "AdamW (with their zero gradient) as soon as the step has copied the table to the GPU, so that its "
             "update after the backward, which the next step's first copy waits for, steps only the rows the tokens "
             "read (default). off: the whole table after the backward. The same arithmetic either way"),
    cl::init("on"), cl::value_desc("on|off"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> UpdateOrderFlag(
    "update-order",
    cl::desc("The order of the host's AdamW updates of streamed units. auto (default): where steps overlap, the "
             "unit the next forward needs first among those whose gradients have come goes first, the others' "
             "gradients waiting in more grad and pinned staging slots, where the cost model predicts a step 1% "
             "shorter within the budgets. arrival: each as its gradients arrive"),
    cl::init("auto"), cl::value_desc("auto|arrival"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> Bf16WeightCopies(
    "bf16-weight-copies",
    cl::desc("on: bf16 plans keep a bf16 copy beside each weight slot (2 bytes a parameter of the largest streamed "
             "unit), made once as the unit's weights arrive, so that its products read them as bf16 instead of "
             "converting them each time. off (default): no copies (less GPU memory)"),
    cl::init("off"), cl::value_desc("on|off"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> PackCache(
    "pack-cache",
    cl::desc("on (default): bf16 plans keep, for each run of a unit's program, the bf16 copies of the products' "
             "operands that a later product reads again (a layer's normed input, read by its q, k and v products "
             "and their weight gradients), in GPU memory the plan sizes from its programs (less where the GPU "
             "budget leaves less); the results are the same bit for bit. off: each product converts its operands"),
    cl::init("on"), cl::value_desc("on|off"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> Bf16WeightStream(
    "bf16-weight-stream",
    cl::desc("on: in bf16 plans, the weights that only matrix products read (which read them as bf16 anyway) cross "
             "PCIe as bf16, half the bytes of the weights' copies to the GPU: the host's AdamW writes a bf16 copy "
             "beside each fp32 master (2 more bytes of pinned host memory a parameter), and the results are the "
             "same bit for bit. Implies --bf16-weight-copies on. auto (default): on where the cost model predicts "
             "a step 1% shorter within the GPU budget and --host-mem (else this machine's available memory; the "
             "host memory it takes may be worth more as grad slots). off: the weights stream as fp32"),
    cl::init("auto"), cl::value_desc("auto|on|off"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<int> Gpus(
    "gpus",
    cl::desc("GPUs of this host a step runs on (default 1). Each runs --grad-accum micro-batches of its own through "
             "the plan's schedule (a step takes N x --grad-accum of them), and the host sums their gradients before "
             "its one AdamW step; every unit streams and steps on the host. Set at compile, recorded in checkpoints. "
             "This megac runs the GPUs' shares one after another on one device"),
    cl::init(1), cl::value_desc("N"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> MicroBatchesPerPass(
    "micro-batches-per-pass",
    cl::desc("With --grad-accum N: micro-batches each pass carries through every unit, so that a unit streams in "
             "once per pass and its gradients are summed on the GPU (a divisor of N; auto (default): the most whose "
             "per-micro-batch checkpoints fit the GPU budget)"),
    cl::init("auto"), cl::value_desc("M|auto"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> OffloadCheckpoints(
    "offload-checkpoints",
    cl::desc("The first N units whose layer-boundary checkpoints go to pinned host memory after their forward and "
             "come back (prefetched, overlapped with compute) before their backward; the last units' never leave "
             "(auto (default): none where the plan fits the GPU budget, else the fewest that make it fit; all: every "
             "unit's that can)"),
    cl::init("auto"), cl::value_desc("N|auto|all"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> SeqChunks(
    "seq-chunks",
    cl::desc("Slices of the sequence each unit's MLP block runs over, one after another (its per-token "
             "intermediates then take that much less GPU memory; a divisor of --seq). auto (default): 1 where the "
             "plan fits the GPU budget (and --host-mem), else the fewest of 2, 4, 8, ... 64 that make it fit"),
    cl::init("auto"), cl::value_desc("K|auto"), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> ProfileFile("profile", cl::desc("Machine profile file (default: the built-in H200 profile)"),
                                        cl::value_desc("FILE"), cl::sub(compileCmd()), cl::sub(trainCmd()),
                                        cl::sub(runCmd()));
static cl::opt<std::string> Compute("compute",
                                    cl::desc("GPU matrix products: bf16 (default; fp32 accumulation) | tf32 | fp32. "
                                             "Tensors and master weights are fp32 in every mode; the CPU backend "
                                             "computes in fp32 unless run with --emulate-compute"),
                                    cl::init("bf16"), cl::sub(compileCmd()), cl::sub(trainCmd()));

// --- run ---
static cl::opt<std::string> PlanIn(cl::Positional, cl::desc("<model.plan>"), cl::Required, cl::sub(runCmd()));

// --- optimizer flags: set at compile; run may override all but --clip and
// --grad-accum, which shape the plan's schedule ---
#define OPT_SUBS cl::sub(compileCmd()), cl::sub(runCmd()), cl::sub(trainCmd())
static cl::opt<float> Lr("lr", cl::desc("Peak learning rate (default 1e-3)"), cl::init(1e-3f), OPT_SUBS);
static cl::opt<int64_t> Warmup("warmup", cl::desc("Linear warmup steps (default 0)"), cl::init(0), OPT_SUBS);
static cl::opt<std::string> Schedule("schedule", cl::desc("constant | cosine (default constant)"),
                                     cl::init("constant"), OPT_SUBS);
static cl::opt<float> MinLr("min-lr", cl::desc("Final learning rate of the cosine schedule (default 0)"),
                            cl::init(0.0f), OPT_SUBS);
static cl::opt<float> WeightDecay("weight-decay", cl::desc("AdamW decoupled weight decay (default 0.01)"),
                                  cl::init(0.01f), OPT_SUBS);
static cl::opt<std::string> NoDecay("no-decay", cl::desc("Regex of parameter names without weight decay"), OPT_SUBS);
static cl::opt<std::string> Betas("betas", cl::desc("AdamW betas B1,B2 (default 0.9,0.999)"), cl::init("0.9,0.999"),
                                  OPT_SUBS);
static cl::opt<float> Eps("eps", cl::desc("AdamW epsilon (default 1e-8)"), cl::init(1e-8f), OPT_SUBS);
static cl::opt<float> Clip("clip",
                           cl::desc("Clip the global gradient norm to this; 0 = off (default). Set at compile: the "
                                    "step's gradients then wait on the host for the norm"),
                           cl::init(0.0f), OPT_SUBS);
static cl::opt<int64_t> GradAccum("grad-accum",
                                  cl::desc("Micro-batches per optimizer step (default 1; each GPU's with --gpus). Set at compile: "
                                           "each pass carries --micro-batches-per-pass of them through every unit"),
                                  cl::init(1), OPT_SUBS);
static cl::opt<bool> NoFiniteCheck(
    "no-finite-check",
    cl::desc("Do not check each unit's gradients for NaN/Inf before its AdamW update (the check reads the "
             "gradients once more; a NaN then reaches the weights)"),
    OPT_SUBS);
static cl::opt<int64_t> Seed("seed", cl::desc("Seed for data sampling and --init (default 0)"), cl::init(0),
                             OPT_SUBS);
#undef OPT_SUBS

// --- run flags ---
#define RUN_SUBS cl::sub(runCmd()), cl::sub(trainCmd())
static cl::opt<int64_t> Steps("steps", cl::desc("Total optimizer steps"), cl::init(0), RUN_SUBS);
static cl::opt<std::string> Data("data", cl::desc("Token file (uint16/uint32, or llm.c .bin)"), RUN_SUBS);
static cl::opt<std::string> Text("text", cl::desc("Text file read as bytes (byte-level models)"), RUN_SUBS);
static cl::opt<std::string> Mask("mask",
                                 cl::desc("Loss mask for --data: one uint8 per token, no header (0: the token is "
                                          "not a counted target, as for an instruction's prompt); tools/prepare_data.py "
                                          "writes it"),
                                 cl::value_desc("FILE"), RUN_SUBS);
static cl::opt<std::string> ValData("val-data", cl::desc("Held-out token file"), RUN_SUBS);
static cl::opt<std::string> ValMask("val-mask", cl::desc("Loss mask for --val-data (as --mask)"),
                                    cl::value_desc("FILE"), RUN_SUBS);
static cl::opt<int64_t> EvalEvery("eval-every", cl::desc("Evaluate the held-out loss every K steps"), cl::init(0),
                                  RUN_SUBS);
static cl::opt<std::string> InputIds("input", cl::desc("Fixed batch: input_ids (TensorProto)"), RUN_SUBS);
static cl::opt<std::string> TargetsFile("targets", cl::desc("Fixed batch: targets (TensorProto)"), RUN_SUBS);
static cl::opt<std::string> Device("device", cl::desc("cpu | cuda (default: cuda where a GPU is present)"),
                                   cl::init(""), RUN_SUBS);
static cl::opt<std::string> CheckpointDir("checkpoint-dir", cl::desc("Directory for checkpoints"), RUN_SUBS);
static cl::opt<int64_t> CheckpointEvery("checkpoint-every", cl::desc("Checkpoint every K steps (and at the end)"),
                                        cl::init(0), RUN_SUBS);
static cl::opt<std::string> Resume("resume", cl::desc("Resume from this checkpoint directory"), RUN_SUBS);
static cl::opt<std::string> Weights(
    "weights",
    cl::desc("Initial weights: Hugging Face safetensors (a save_pretrained directory, model.safetensors, or "
             "model.safetensors.index.json), an ONNX file, or a megac checkpoint directory (which resumes its "
             "moments and step too); matched to the plan's parameters by name"),
    cl::value_desc("PATH"), RUN_SUBS);
static cl::opt<bool> Init("init", cl::desc("Initialize weights that have no data (N(0,0.02), ones, zeros)"),
                          RUN_SUBS);
static cl::opt<bool> InitMissing("init-missing",
                                 cl::desc("With --weights: initialize the parameters the weights lack (as --init "
                                          "does) instead of stopping with the list of them"),
                                 RUN_SUBS);
static cl::opt<std::string> Log("log", cl::desc("Write one JSON object per step to this file"), RUN_SUBS);
static cl::opt<bool> EmulateCompute(
    "emulate-compute",
    cl::desc("--device cpu: round every matrix product's operands as the plan's --compute mode does on the GPU "
             "(bf16 or tf32, fp32 accumulation) instead of computing in fp32"),
    RUN_SUBS);
static cl::opt<std::string> ModelFile("model",
                                      cl::desc("The ONNX file the plan was compiled from, where it is no longer "
                                               "where the plan records it (beside the plan as at compile time)"),
                                      cl::value_desc("FILE"), cl::sub(runCmd()));
static cl::opt<uint64_t> StreamSeed(
    "stream-seed",
    cl::desc("--device cpu: which legal interleaving of the schedule's streams the CPU stream executor runs "
             "(default 0; every seed gives the same numbers unless the schedule has a race)"),
    cl::init(0), RUN_SUBS);
static cl::opt<bool> CheckReads("check-reads",
                                cl::desc("--device cpu: check every read of the simulated device memory against "
                                         "the write it expects (a debug aid; the tests run with it)"),
                                RUN_SUBS);
static cl::opt<bool> CpuDirect("cpu-direct",
                               cl::desc("--device cpu: run the units' programs one after the other instead of "
                                        "through the plan's streaming schedule (the executor's reference; it "
                                        "needs no host memory for the simulated GPU memory)"),
                               RUN_SUBS);
static cl::opt<double> AnnounceHostGiB(
    "announce-host-gib", cl::Hidden,
    cl::desc("Host state of this many GiB or more is announced before it is allocated and pinned (default 8)"),
    cl::init(8.0), RUN_SUBS);
static cl::opt<bool> OpProfile("op-profile", cl::desc("--device cuda: time every op and print GPU time by op type"),
                               RUN_SUBS);
static cl::opt<std::string> TimelineOut(
    "timeline",
    cl::desc("Write the last step's measured lanes (its last micro-batch) as an HTML page in the format of "
             "`megac plan --html`, the predicted step beside it"),
    cl::value_desc("FILE.html"), RUN_SUBS);
#undef RUN_SUBS

static llvm::Error flagError(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

// A flag's value as the user would write it ("nan", "1e-05").
static std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Applies the optimizer flags to `o`: all of them when `all`, else only
// those given on the command line (run overriding the plan's defaults).
static llvm::Error applyOptimizerFlags(plan::Optimizer &o, bool all) {
  auto given = [&](const cl::Option &opt) { return all || opt.getNumOccurrences() > 0; };
  if (given(Lr)) {
    if (!(Lr > 0) || !std::isfinite(Lr)) return flagError("--lr must be a positive number (got " + num(Lr) + ")");
    o.set_lr(Lr);
  }
  if (given(Warmup)) {
    if (Warmup < 0) return flagError("--warmup must be >= 0");
    o.set_warmup(Warmup);
  }
  if (given(Schedule)) {
    if (Schedule != "constant" && Schedule != "cosine")
      return flagError("--schedule must be constant or cosine, not '" + Schedule + "'");
    o.set_schedule(Schedule);
  }
  if (given(MinLr)) {
    if (!(MinLr >= 0) || !std::isfinite(MinLr))
      return flagError("--min-lr must be a number >= 0 (got " + num(MinLr) + ")");
    o.set_min_lr(MinLr);
  }
  if (o.min_lr() > o.lr())
    return flagError("--min-lr " + num(o.min_lr()) + " is above --lr " + num(o.lr()) +
                     ": the cosine schedule decays from --lr to --min-lr");
  if (given(WeightDecay)) {
    if (!(WeightDecay >= 0) || !std::isfinite(WeightDecay))
      return flagError("--weight-decay must be a number >= 0 (got " + num(WeightDecay) + ")");
    o.set_weight_decay(WeightDecay);
  }
  if (given(NoDecay)) o.set_no_decay(NoDecay);
  if (given(Betas)) {
    auto [a, b] = llvm::StringRef(Betas).split(',');
    double b1, b2;
    if (a.getAsDouble(b1) || b.getAsDouble(b2) || !(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
      return flagError("--betas expects B1,B2 in [0, 1), got '" + Betas + "'");
    o.set_beta1(float(b1));
    o.set_beta2(float(b2));
  }
  if (given(Eps)) {
    if (!(Eps > 0) || !std::isfinite(Eps)) return flagError("--eps must be a positive number (got " + num(Eps) + ")");
    o.set_eps(Eps);
  }
  if (given(Clip)) {
    if (!(Clip >= 0) || !std::isfinite(Clip))
      return flagError("--clip must be a number >= 0 (0: off; got " + num(Clip) + ")");
    if (!all && Clip != o.clip())
      return flagError("--clip " + num(Clip) + ": the plan was compiled with --clip " + num(o.clip()) +
                       ", which shapes its schedule (the step's gradients wait on the host for the global norm); "
                       "recompile with megac compile --clip " + num(Clip));
    o.set_clip(Clip);
  }
  if (given(GradAccum)) {
    if (GradAccum < 1) return flagError("--grad-accum must be >= 1");
    if (!all && GradAccum != std::max<int64_t>(o.grad_accum(), 1))
      return flagError("--grad-accum " + llvm::Twine(GradAccum) + ": the plan was compiled with --grad-accum " +
                       llvm::Twine(std::max<int64_t>(o.grad_accum(), 1)) +
                       ", which shapes its schedule (the micro-batches each unit carries in a pass); recompile "
                       "with megac compile --grad-accum " + llvm::Twine(GradAccum));
    o.set_grad_accum(GradAccum);
  }
  if (given(NoFiniteCheck)) o.set_no_finite_check(NoFiniteCheck);
  if (given(Seed)) {
    if (Seed < 0) return flagError("--seed must be >= 0 (got " + llvm::Twine(Seed) + ")");
    o.set_seed(Seed);
  }
  return llvm::Error::success();
}

// --profile FILE, or the built-in profile.
static llvm::Expected<plan::MachineProfile> profileFlag() {
  if (ProfileFile.empty()) return plan::MachineProfile();
  return plan::readMachineProfile(ProfileFile);
}

static llvm::Expected<codegen::ScheduleOptions> scheduleFlags() {
  codegen::ScheduleOptions so;
  auto read = profileFlag();
  if (!read) return read.takeError();
  const plan::MachineProfile profile = *read;
  auto slots = codegen::parseWeightSlots(WeightSlots);
  if (!slots) return slots.takeError();
  so.weightSlots = *slots;
  auto recompute = codegen::parseRecompute(RecomputeFlag);
  if (!recompute) return recompute.takeError();
  so.recompute = *recompute;
  auto resident = codegen::parseResidentUnits(ResidentUnits);
  if (!resident) return resident.takeError();
  so.residentUnits = *resident;
  auto gpuAdamw = codegen::parseGpuAdamwUnits(GpuAdamwUnits);
  if (!gpuAdamw) return gpuAdamw.takeError();
  so.gpuAdamwUnits = *gpuAdamw;
  auto perPass = codegen::parseMicroBatchesPerPass(MicroBatchesPerPass);
  if (!perPass) return perPass.takeError();
  so.microBatches = *perPass;
  auto offload = codegen::parseOffloadCheckpoints(OffloadCheckpoints);
  if (!offload) return offload.takeError();
  so.offloadCheckpoints = *offload;
  if (OverlapSteps != "on" && OverlapSteps != "off")
    return flagError("--overlap-steps must be on or off, not '" + OverlapSteps + "'");
  so.overlapSteps = OverlapSteps == "on";
  if (UnreadRowsEarly != "on" && UnreadRowsEarly != "off")
    return flagError("--unread-rows-early must be on or off, not '" + UnreadRowsEarly + "'");
  so.unreadRowsEarly = UnreadRowsEarly == "on";
  auto order = codegen::parseUpdateOrder(UpdateOrderFlag);
  if (!order) return order.takeError();
  so.updateOrder = *order;
  if (Bf16WeightCopies != "on" && Bf16WeightCopies != "off")
    return flagError("--bf16-weight-copies must be on or off, not '" + Bf16WeightCopies + "'");
  so.bf16WeightCopies = Bf16WeightCopies == "on";
  if (PackCache != "on" && PackCache != "off")
    return flagError("--pack-cache must be on or off, not '" + PackCache + "'");
  so.packCache = PackCache == "on";
  if (Bf16WeightStream != "on" && Bf16WeightStream != "off" && Bf16WeightStream != "auto")
    return flagError("--bf16-weight-stream must be auto, on or off, not '" + Bf16WeightStream + "'");
  so.bf16WeightStream = Bf16WeightStream == "on";
  so.bf16WeightStreamAuto = Bf16WeightStream == "auto";
  if (Gpus < 1 || Gpus > 64) return flagError("--gpus must be between 1 and 64, got " + llvm::Twine(int(Gpus)));
  so.gpus = Gpus;
  so.profile = profile;
  so.gpuBudgetBytes = profile.usableGpuBytes();
  if (GpuMem.getNumOccurrences()) {
    if (!(GpuMem > 0) || !(GpuMem < 1e9)) return flagError("--gpu-mem must be a positive number of GiB");
    so.gpuBudgetBytes = plan::MachineProfile::gibToBytes(GpuMem);
  }
  if (HostMem.getNumOccurrences()) {
    if (!(HostMem > 0) || !(HostMem < 1e9)) return flagError("--host-mem must be a positive number of GiB");
    so.hostBudgetBytes = plan::MachineProfile::gibToBytes(HostMem);
  } else {
    so.autoHostBudgetBytes = std::max<int64_t>(runtime::readHostMemory().available(), 0);
  }
  return so;
}

// What the compile flags ask for.
struct CompileInputs {
  ModelFlags flags;
  codegen::CodegenOptions co;
};

static llvm::Expected<CompileInputs> compileInputs() {
  auto flags = modelFlags();
  if (!flags) return flags.takeError();
  if (flags->import.batch <= 0 || flags->import.seq <= 0)
    return flagError("compile needs --batch B and --seq S");
  flags->passes.ignoreIndex = IgnoreIndex;
  flags->passes.fuseLinearCrossEntropy = !NoFusedLoss;
  if (SeqChunks == "auto") {
    flags->passes.sequenceChunks = -1;
  } else if (llvm::StringRef(SeqChunks).getAsInteger(10, flags->passes.sequenceChunks) || flags->passes.sequenceChunks < 1 ||
             flags->import.seq % flags->passes.sequenceChunks != 0) {
    return flagError("--seq-chunks must be auto or a count >= 1 that divides --seq " + std::to_string(flags->import.seq) + ", got '" +
                     SeqChunks + "'");
  }
  codegen::CodegenOptions co;
  if (Compute != "bf16" && Compute != "tf32" && Compute != "fp32")
    return flagError("--compute must be bf16, tf32 or fp32, got '" + Compute + "'");
  co.compute = Compute;
  if (auto e = applyOptimizerFlags(co.optimizer, /*all=*/true)) return std::move(e);
  auto schedule = scheduleFlags();
  if (!schedule) return schedule.takeError();
  co.schedule = *schedule;
  return CompileInputs{*flags, co};
}

static llvm::Expected<plan::Plan> compileModel() {
  auto in = compileInputs();
  if (!in) return in.takeError();
  return driver::compileForTraining(Model, in->flags.import, in->flags.passes, in->co);
}

static void printPlanSummary(const plan::Plan &p, llvm::raw_ostream &os) {
  os << "plan: " << p.units_size() << " units (";
  for (int i = 0; i < p.units_size(); ++i) os << (i ? ", " : "") << p.units(i).name();
  os << "), " << p.templates_size() << " templates, " << p.total_parameters() << " parameters, batch " << p.batch()
     << " x seq " << p.seq() << ", vocab " << p.vocab() << "\n";
}

int runCompile() {
  if (PlanOut.empty()) return reportError(flagError("compile needs -o model.plan"));
  auto in = compileInputs();
  if (!in) return reportError(in.takeError());
  auto plan = driver::compileForTraining(Model, in->flags.import, in->flags.passes, in->co);
  if (!plan) return reportError(plan.takeError());
  if (auto e = plan::writePlan(*plan, PlanOut)) return reportError(std::move(e));
  printPlanSummary(*plan, llvm::outs());
  if (Stats) {
    const passes::MaskReadingStats &m = passes::maskReadingStats();
    llvm::outs() << "attention masks over the fold limit: " << m.recognized << " read from their ops, " << m.evaluated
                 << " evaluated by blocks of rows (" << m.entriesEvaluated << " entries)\n";
  }
  if (LongestSeqFlag) {
    auto l = driver::longestSeqAtBatch1(Model, in->flags.import, in->flags.passes, in->co);
    if (!l) return reportError(l.takeError());
    const double gib = double(int64_t(1) << 30);
    llvm::outs() << "longest seq that fits at batch 1: ";
    if (l->seq == 0) llvm::outs() << "none (seq 64 does not fit the GPU budget)\n";
    else
      llvm::outs() << l->seq << " (GPU " << llvm::format("%.2f", double(l->deviceBytes) / gib) << " of "
                   << llvm::format("%.2f", double(in->co.schedule.gpuBudgetBytes) / gib) << " GiB, "
                   << l->bytesPerToken << " bytes a token; " << l->compiles << " compiles)"
                   << driver::howItFits(*l, in->flags.passes.sequenceChunks < 0) << "\n";
  }
  llvm::outs() << "wrote " << PlanOut << "\n";
  return 0;
}

static llvm::Expected<std::unique_ptr<runtime::Trainer>> createGpuTrainer(const plan::Plan &plan) {
#ifdef MEGAC_HAS_CUDA
  cuda::CudaOptions o;
  o.opProfile = OpProfile;
  return cuda::createCudaTrainer(plan, o);
#else
  return flagError("this megac was built without the CUDA runtime");
#endif
}

// --timeline: the last step's measured lanes beside the cost model's step.
static llvm::Error writeRunTimeline(const plan::Plan &plan, runtime::Trainer &t, size_t steps) {
  const std::vector<std::pair<double, double>> times = t.lastActionTimes();
  if (times.empty())
    return flagError("--timeline draws the schedule's actions as they ran; --cpu-direct runs none (drop it)");
  auto read = profileFlag();
  if (!read) return read.takeError();
  const plan::MachineProfile profile = *read;
  auto report = plan::reportPlan(plan, profile);
  if (!report) return report.takeError();
  std::string what = std::string("megac run --device ") + t.device() + ", step " + std::to_string(steps) + " of " +
                     std::to_string(steps);
  if (plan::planGpus(plan) > 1) what += " (the last GPU's last pass)";
  else if (plan::stepKeepsGradients(plan) && plan.optimizer().grad_accum() > 1) what += " (its last pass)";
  if (std::string(t.device()) == "cpu")
    what += "; the CPU backend runs one action at a time, in the order its stream seed chose";
  const std::string source = PlanIn.empty() ? plan.model_path() : std::string(PlanIn); // megac train has no plan file
  if (auto e = writeTextFile(TimelineOut, [&](llvm::raw_ostream &os) {
        return plan::writeMeasuredTimeline(plan, *report, profile, times, what, source, os);
      }))
    return e;
  llvm::outs() << "timeline: " << TimelineOut << " (measured step " << steps << ")\n";
  return llvm::Error::success();
}

static int trainOnPlan(plan::Plan plan) {
  if (!Device.empty() && Device != "cpu" && Device != "cuda")
    return reportError(flagError("--device must be cpu or cuda"));
#ifdef MEGAC_HAS_CUDA
  std::string noGpu;
  bool haveGpu = cuda::cudaDeviceAvailable(&noGpu);
  if (Device == "cuda" && !haveGpu) return reportError(flagError("--device cuda: " + noGpu));
  const bool onGpu = Device == "cuda" || (Device.empty() && haveGpu);
#else
  if (Device == "cuda")
    return reportError(flagError("--device cuda: this megac was built without the CUDA runtime"));
  const bool onGpu = false;
#endif
  if (auto e = applyOptimizerFlags(*plan.mutable_optimizer(), /*all=*/false)) return reportError(std::move(e));
  if (NoDecay.getNumOccurrences())
    if (auto e = plan::applyNoDecay(plan)) return reportError(std::move(e));
  runtime::TrainLoopOptions lo;
  lo.steps = Steps;
  if (Steps <= 0) return reportError(flagError("--steps N is required (N > 0)"));
  int sources = !Data.empty() + !Text.empty() + !InputIds.empty();
  if (sources != 1)
    return reportError(flagError("give exactly one data source: --data FILE, --text FILE, or --input/--targets"));
  lo.data = Data;
  lo.text = Text;
  lo.valData = ValData;
  lo.mask = Mask;
  lo.valMask = ValMask;
  if (!Mask.empty() && Data.empty())
    return reportError(flagError("--mask goes with --data (a token file; --text and --input carry no mask)"));
  if (!ValMask.empty() && ValData.empty()) return reportError(flagError("--val-mask goes with --val-data"));
  lo.valIsText = !Text.empty(); // held-out text when training on text
  lo.evalEvery = EvalEvery;
  if (EvalEvery.getNumOccurrences() && EvalEvery < 1)
    return reportError(flagError("--eval-every must be >= 1 (got " + llvm::Twine(EvalEvery) + ")"));
  if (EvalEvery > 0 && ValData.empty())
    return reportError(flagError("--eval-every needs --val-data FILE (the held-out tokens to evaluate)"));
  if (CheckpointEvery.getNumOccurrences() && CheckpointEvery < 1)
    return reportError(flagError("--checkpoint-every must be >= 1 (got " + llvm::Twine(CheckpointEvery) +
                                 "); without it, a run checkpoints only at its end"));
  if (CheckpointEvery > 0 && CheckpointDir.empty())
    return reportError(flagError("--checkpoint-every needs --checkpoint-dir DIR"));
  if (!InputIds.empty()) {
    if (TargetsFile.empty()) return reportError(flagError("--input needs --targets"));
    auto ids = frontend::readTensorFile(InputIds);
    if (!ids) return reportError(ids.takeError());
    auto tg = frontend::readTensorFile(TargetsFile);
    if (!tg) return reportError(tg.takeError());
    lo.fixedTokens = *ids;
    lo.fixedTargets = *tg;
  }
  lo.checkpointDir = CheckpointDir;
  lo.checkpointEvery = CheckpointEvery;
  lo.resume = Resume;
  lo.init = Init;
  lo.initMissing = InitMissing;
  lo.seed = uint64_t(plan.optimizer().seed());
  lo.readers = runtime::fileWeightReaders(); // the runtime reads weights through these (runtime/weights/)
  lo.logPath = Log;
  if (InitMissing && Weights.empty())
    return reportError(flagError("--init-missing goes with --weights (it initializes what the weights lack)"));
  if (!Weights.empty()) {
    if (!Resume.empty()) return reportError(flagError("--weights and --resume cannot be combined"));
    auto kind = runtime::classifyWeightsPath(Weights);
    if (!kind) return reportError(kind.takeError());
    if (kind->format == runtime::WeightFormat::MegacCheckpoint) {
      if (InitMissing) return reportError(flagError("--init-missing: a megac checkpoint holds every parameter"));
      lo.resume = Weights; // weights from a checkpoint: moments and step come along
    } else {
      lo.weights = Weights;
    }
  }
  if (OpProfile && !onGpu) return reportError(flagError("--op-profile times GPU ops: it needs --device cuda"));
  if (EmulateCompute && onGpu)
    return reportError(flagError("--emulate-compute is for the CPU backend (the GPU runs the mode itself): add --device cpu"));
  if (onGpu && (StreamSeed.getNumOccurrences() || CheckReads || CpuDirect))
    return reportError(flagError("--stream-seed, --check-reads and --cpu-direct are for the CPU backend: add --device cpu"));
  runtime::CpuOptions cpuOpts = runtime::CpuOptions::fromEnvironment();
  if (StreamSeed.getNumOccurrences()) cpuOpts.streamSeed = StreamSeed;
  if (CheckReads) cpuOpts.checkReads = true;
  if (CpuDirect) cpuOpts.streamSchedule = false;
  // A large host state takes a while to allocate, zero and pin (the 8B
  // streamed holds 105 GiB): say so before the wait, and how long it took.
  auto bill = plan::hostBill(plan);
  if (!bill) return reportError(bill.takeError());
  if (!onGpu && cpuOpts.streamSchedule) bill->simulatedDevice = plan.schedule().device_bytes(); // the stream executor's
  const bool announce = double(bill->total()) >= AnnounceHostGiB * double(1ull << 30);
  const auto preparing = std::chrono::steady_clock::now();
  if (announce) {
    std::string parts;
    for (const plan::HostBill::Part &part : bill->parts())
      if (part.bytes > 0) parts += std::string(parts.empty() ? "" : ", ") + part.name;
    llvm::outs() << llvm::format("preparing %.1f GiB of host memory (", double(bill->total()) / (1ull << 30)) << parts
                 << ")\n";
    llvm::outs().flush();
  }
  llvm::Expected<std::unique_ptr<runtime::Trainer>> trainer =
      onGpu ? createGpuTrainer(plan) : runtime::Trainer::create(plan, cpuOpts);
  if (!trainer) return reportError(trainer.takeError());
  if (announce)
    llvm::outs() << llvm::format("host memory ready in %.1f s\n",
                                 std::chrono::duration<double>(std::chrono::steady_clock::now() - preparing).count());
  (*trainer)->emulatePlanCompute(EmulateCompute);
  auto losses = runtime::runTraining(**trainer, lo);
  if (!losses) return reportError(losses.takeError());
  (*trainer)->report(llvm::outs());
  if (!TimelineOut.empty())
    if (auto e = writeRunTimeline(plan, **trainer, losses->size())) return reportError(std::move(e));
  if (losses->size() >= 2)
    llvm::outs() << llvm::format("done: loss %.4f -> %.4f over %zu steps\n", losses->front(), losses->back(),
                                 losses->size());
  return 0;
}

int runRun() {
  auto plan = plan::readPlan(PlanIn);
  if (!plan) return reportError(plan.takeError());
  if (!ModelFile.empty()) {
    llvm::SmallString<256> abs(ModelFile);
    llvm::sys::fs::make_absolute(abs);
    plan->set_model_path(std::string(abs));
  }
  return trainOnPlan(std::move(*plan));
}

int runTrain() {
  auto plan = compileModel();
  if (!plan) return reportError(plan.takeError());
  printPlanSummary(*plan, llvm::outs());
  return trainOnPlan(std::move(*plan));
}

} // namespace megac::driver
