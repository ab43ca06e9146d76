#include "tools/inspect/PlanReport.h"

#include "runtime/core/DType.h"
#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/Bf16Weights.h"
#include "runtime/plan/HostBill.h"
#include "runtime/plan/PlanLabels.h"
#include "runtime/plan/StreamLayout.h"
#include "runtime/plan/TokenRows.h"
#include "runtime/plan/UnitPrograms.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>

namespace megac::plan {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static int64_t constantBytes(const Program &p) {
  int64_t bytes = 0;
  for (const Program::Value &v : p.values())
    if (v.kind() == Program::Value::CONSTANT) bytes += int64_t(v.constant().data().size());
  return bytes;
}

// Bytes covered by the union of [offset, offset + bytes) ranges.
static int64_t unionBytes(std::vector<std::pair<int64_t, int64_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  int64_t bytes = 0, covered = std::numeric_limits<int64_t>::min();
  for (auto [begin, end] : ranges) {
    begin = std::max(begin, covered);
    if (end > begin) {
      bytes += end - begin;
      covered = end;
    }
  }
  return bytes;
}

static llvm::Error reportSchedule(const Plan &p, const MemoryReport &m, const MachineProfile &profile,
                                  ScheduleReport &r) {
  const StreamSchedule &s = p.schedule();
  r.weightSlots = s.weight_slots();
  r.gradSlots = s.grad_slots();
  r.weightSlotBytes = s.weight_slot_bytes();
  r.gradSlotBytes = s.grad_slot_bytes();
  r.smallGradSlots = s.small_grad_slots();
  r.smallGradSlotBytes = s.small_grad_slot_bytes();
  r.actions = s.actions_size();
  r.microBatchesPerPass = passMicroBatches(s);
  r.deviceBytes = s.device_bytes();
  r.gpuBudgetBytes = s.gpu_budget_bytes();
  r.packCacheBytes = s.pack_cache_bytes();
  for (int k = DeviceRegion::Kind_MIN; k <= DeviceRegion::Kind_MAX; ++k) {
    if (!DeviceRegion::Kind_IsValid(k)) continue;
    DeviceCategory c;
    c.kind = DeviceRegion::Kind(k);
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const DeviceRegion &d : s.regions()) {
      if (d.kind() != c.kind) continue;
      ++c.regions;
      // Saturating: a plan not yet checked may hold any sizes (the host-memory check reads this first).
      if (__builtin_add_overflow(c.sumBytes, d.bytes(), &c.sumBytes)) c.sumBytes = INT64_MAX;
      int64_t end = 0;
      if (__builtin_add_overflow(d.offset(), d.bytes(), &end)) end = INT64_MAX;
      ranges.push_back({d.offset(), end});
    }
    c.footprintBytes = unionBytes(std::move(ranges));
    r.device.push_back(c);
  }

  r.pinnedStagingBytes = s.pinned_staging_bytes();
  r.pinnedCheckpointBytes = s.pinned_checkpoint_bytes();
  r.bf16WeightBytes = 2 * bf16WeightLayout(p).elements;
  for (const Parameter &q : p.parameters()) r.bf16Parameters += q.streams_bf16() ? q.numel() : 0;
  // Saturating, as above: the host-memory check reads an unchecked plan's staging size here.
  r.hostBytes = 0;
  for (int64_t part : {m.masterWeightBytes, m.adamMomentBytes, m.gradientBytes, r.pinnedStagingBytes, r.pinnedCheckpointBytes,
                       r.bf16WeightBytes})
    if (__builtin_add_overflow(r.hostBytes, std::max<int64_t>(part, 0), &r.hostBytes)) r.hostBytes = INT64_MAX;
  r.bytesPerParameter = m.parameters > 0 ? double(r.hostBytes) / double(m.parameters) : 0;

  std::vector<bool> unitOffloads(size_t(p.units_size()), false);
  for (const StreamAction &a : s.actions()) {
    if (a.kind() == StreamAction::SAVE_CHECKPOINT) {
      ++r.offloadedCheckpoints;
      if (a.unit() >= 0 && a.unit() < p.units_size() && !unitOffloads[size_t(a.unit())]) {
        unitOffloads[size_t(a.unit())] = true;
        ++r.offloadedUnits;
      }
    }
    if (isCheckpointCopy(a.kind())) {
      const int64_t bytes = checkpointCopyBytes(p, a);
      (a.stream() == StreamAction::H2D ? r.h2dBytesPerPass : r.d2hBytesPerPass) += bytes;
      if (a.kind() == StreamAction::SAVE_CHECKPOINT) r.checkpointBytesPerPass += bytes;
    }
    const int64_t copies = transferCopies(a.kind());
    if (copies == 0) continue;
    if (a.unit() < 0 || a.unit() >= p.units_size())
      return err("schedule action refers to unit " + llvm::Twine(a.unit()) + ", which does not exist");
    int64_t bytes = a.kind() == StreamAction::PREFETCH ? prefetchBytes(p, a.unit()) : copies * unitWeightLayout(p, a.unit()).bytes;
    (a.stream() == StreamAction::H2D ? r.h2dBytesPerPass : r.d2hBytesPerPass) += bytes;
  }
  r.momentsMove = anyAdamwOnGpu(p);
  r.h2dBytesPerStep = r.h2dBytesPerPass * m.passesPerStep;
  r.d2hBytesPerStep = r.d2hBytesPerPass * m.passesPerStep;

  r.profileName = profile.description;
  if (m.gpus > 1) {
    r.gpuCopyShare = gpuCopyShare(profile, m.gpus);
    if (r.gpuCopyShare > 0)
      if (auto all = predictStep(p, profile, m.gpus)) r.stepSecondsAllGpus = all->stepSeconds;
      else llvm::consumeError(all.takeError()); // the one-GPU prediction below says why
  }
  auto prediction = predictStep(p, profile);
  if (prediction) {
    r.predicted = true;
    r.prediction = std::move(*prediction);
  } else {
    r.predictionError = llvm::toString(prediction.takeError());
  }
  return llvm::Error::success();
}

llvm::Expected<PlanReport> reportPlan(const Plan &p, const MachineProfile &profile) {
  // The bill checks the ids the report reads (an unchecked plan's may be anything).
  auto bill = hostBill(p);
  if (!bill) return bill.takeError();
  PlanReport r;
  r.sequenceChunks = sequenceChunks(p);
  for (const Template &t : p.templates()) {
    TemplateReport tr;
    tr.name = t.name();
    tr.forwardOps = t.forward().ops_size();
    tr.backwardOps = t.backward().ops_size();
    for (const Program::Op &op : t.backward().ops()) ++tr.backwardOpHistogram[op.type()];
    tr.forwardConstantBytes = constantBytes(t.forward());
    tr.backwardConstantBytes = constantBytes(t.backward());
    if (hasKeepPrograms(t)) tr.keptBackwardOps = t.backward_kept().ops_size();
    r.templates.push_back(std::move(tr));
  }

  MemoryReport &m = r.memory;
  std::set<int32_t> checkpoints;
  for (const Unit &u : p.units()) {
    UnitReport ur;
    ur.name = u.name();
    ur.templateId = u.template_id();
    for (int32_t q : u.parameters()) ur.parameters += p.parameters(q).numel();
    ur.weightBytes = 4 * ur.parameters; // fp32 on the host
    ur.keepsActivations = u.keep_activations();
    ur.resident = u.resident();
    ur.adamwOnGpu = adamwOnGpu(u);
    if (ur.keepsActivations && hasKeepPrograms(p.templates(u.template_id())))
      ur.savedBytes = savedLayout(p.templates(u.template_id())).bytes;
    ++r.templates[size_t(u.template_id())].units;
    for (int32_t a : u.activation_inputs())
      if (p.activations(a).kind() == Activation::INTERMEDIATE) checkpoints.insert(a);
    if (ur.weightBytes > m.largestUnitWeightBytes || m.largestUnit.empty()) {
      m.largestUnitWeightBytes = ur.weightBytes;
      m.largestUnit = ur.name;
    }
    m.streamWeightsInBytes += 2 * ur.weightBytes;
    m.streamGradientsOutBytes += ur.weightBytes;
    r.units.push_back(std::move(ur));
  }
  for (int32_t a : checkpoints) m.checkpointBytes += tensorBytes(p.activations(a).type());

  // Counted from the parameter table (not total_parameters) so that a tied
  // weight used by several units counts once.
  for (const Parameter &q : p.parameters()) m.parameters += q.numel();
  const Optimizer &o = p.optimizer();
  m.microBatchesPerStep = std::max<int64_t>(o.grad_accum(), 1);
  m.gpus = planGpus(p);
  m.clipped = o.clip() > 0;
  const int64_t perPass = p.has_schedule() ? passMicroBatches(p.schedule()) : 1;
  m.passesPerStep = perPass > 0 && m.microBatchesPerStep % perPass == 0 ? m.microBatchesPerStep / perPass : m.microBatchesPerStep;
  m.keepsGradients = stepKeepsGradients(p);
  m.masterWeightBytes = bill->masterWeights;
  m.adamMomentBytes = bill->adamMoments;
  m.gradientBytes = bill->gradients;
  m.hostBytes = m.masterWeightBytes + m.adamMomentBytes + m.gradientBytes;
  m.bytesPerParameter = m.keepsGradients ? 16 : 12;
  m.streamBytesPerMicroBatch = m.streamWeightsInBytes + m.streamGradientsOutBytes;
  m.streamBytesPerStep = m.streamBytesPerMicroBatch * m.microBatchesPerStep;
  if (p.has_schedule()) {
    r.hasSchedule = true;
    if (auto e = reportSchedule(p, m, profile, r.schedule)) return std::move(e);
  }
  return r;
}

// --- printing ---

static const char *kindName(Activation::Kind k) {
  switch (k) {
  case Activation::INTERMEDIATE: return "intermediate";
  case Activation::DATA_TOKENS: return "tokens";
  case Activation::DATA_TARGETS: return "targets";
  case Activation::LOSS: return "loss";
  default: return "unknown";
  }
}

static std::string typeString(const TensorType &t) {
  std::string s = "[";
  for (int i = 0; i < t.shape_size(); ++i) s += (i ? "," : "") + std::to_string(t.shape(i));
  s += "] ";
  s += megac::dtypeName(megac::DType(int(t.dtype())));
  return s;
}

// The shortest decimal that reads back as `f` (so 1e-3f prints as 0.001).
static double shortest(float f) {
  char buf[32];
  for (int prec = 1; prec <= 9; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, double(f));
    double d = std::strtod(buf, nullptr);
    if (float(d) == f) return d;
  }
  return double(f);
}

static std::string num(float f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", shortest(f));
  return buf;
}

static double gib(int64_t bytes) { return double(bytes) / double(int64_t(1) << 30); }

static void printBytes(llvm::raw_ostream &os, int64_t bytes) {
  os << bytes << " bytes (" << llvm::format("%.6f", gib(bytes)) << " GiB)";
}

static std::string microBatches(int64_t n) { return std::to_string(n) + (n == 1 ? " micro-batch" : " micro-batches"); }

// Seconds in the unit that suits them: "12.345 ms".
static std::string seconds(double s) {
  char buf[48];
  if (s >= 1) std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (s >= 1e-3) std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.3f us", s * 1e6);
  return buf;
}

// Why the host keeps the step's gradients, or does not.
static std::string gradientsWhy(const MemoryReport &m) {
  if (!m.keepsGradients)
    return m.microBatchesPerStep > 1 ? " (not kept: no clip, and one pass sums the micro-batches on the GPU)"
                                     : " (not kept: no clip, grad-accum 1)";
  if (m.gpus > 1)
    return " (kept: the host adds each of the " + std::to_string(m.gpus) +
           " GPUs' gradients to them as they land; the last GPU's last pass steps each parameter as its sum completes" +
           (m.clipped ? std::string(", after the clip's global norm here") : std::string()) + ")";
  if (m.passesPerStep > 1)
    return " (kept: the step's " + std::to_string(m.passesPerStep) + " passes add to them)";
  return " (kept: the clip waits for the global norm, then every unit's AdamW runs on the host after the step)";
}

static void printHost(llvm::raw_ostream &os, const MemoryReport &m) {
  os << "\nhost memory (exact):\n";
  os << "  fp32 master weights:  ";
  printBytes(os, m.masterWeightBytes);
  os << "\n  AdamW m and v:        ";
  printBytes(os, m.adamMomentBytes);
  os << "\n  step gradients:       ";
  printBytes(os, m.gradientBytes);
  os << gradientsWhy(m);
  os << "\n  total:                ";
  printBytes(os, m.hostBytes);
  os << ", " << m.bytesPerParameter << " bytes per parameter\n";
}

static void printHostWithSchedule(llvm::raw_ostream &os, const MemoryReport &m, const ScheduleReport &s) {
  os << "\nhost memory (exact):\n";
  os << "  fp32 master weights:     ";
  printBytes(os, m.masterWeightBytes);
  os << "\n  AdamW m and v:           ";
  printBytes(os, m.adamMomentBytes);
  os << "\n  pinned gradient staging: ";
  printBytes(os, s.pinnedStagingBytes);
  os << " (" << s.gradSlots << " slots)";
  if (s.bf16WeightBytes > 0) {
    os << "\n  bf16 weights to stream:  ";
    printBytes(os, s.bf16WeightBytes);
    os << " (pinned; " << s.bf16Parameters
       << " parameters that only matrix products read: the host's AdamW rounds them, the PREFETCHes copy 2 bytes each)";
  }
  if (s.pinnedCheckpointBytes > 0) {
    os << "\n  offloaded checkpoints:   ";
    printBytes(os, s.pinnedCheckpointBytes);
    os << " (pinned; " << s.offloadedCheckpoints << (s.offloadedCheckpoints == 1 ? " checkpoint" : " checkpoints") << " of the first " << s.offloadedUnits
       << (s.offloadedUnits == 1 ? " unit" : " units") << ", out after the forward, back before the backward)";
  }
  os << "\n  step gradients:          ";
  printBytes(os, m.gradientBytes);
  os << gradientsWhy(m);
  os << "\n  total:                   ";
  printBytes(os, s.hostBytes);
  os << ", " << llvm::format("%.4f", s.bytesPerParameter) << " bytes per parameter\n";
}

static void printGpuMemory(llvm::raw_ostream &os, const ScheduleReport &s) {
  os << "\nGPU memory (one allocation; " << s.weightSlots << " weight slots, " << s.gradSlots << " grad slots";
  if (s.smallGradSlots > 0) os << ", " << s.smallGradSlots << " of them for the units smaller than the largest";
  os << "):\n";
  for (const DeviceCategory &c : s.device) {
    // Only where AdamW runs on the GPU for streamed units, where checkpoints are offloaded and where slots have bf16 copies.
    if ((c.kind == DeviceRegion::MOMENT_SLOT || c.kind == DeviceRegion::LOADED_CHECKPOINT ||
         c.kind == DeviceRegion::WEIGHT_COPY) &&
        c.regions == 0)
      continue;
    std::string label = std::string(deviceCategoryName(c.kind)) + ":";
    os << "  " << llvm::left_justify(label, 19);
    printBytes(os, c.footprintBytes);
    os << ", " << c.regions << (c.regions == 1 ? " region" : " regions");
    if (c.sumBytes != c.footprintBytes) os << " (" << c.sumBytes << " bytes before sharing)";
    if (c.kind == DeviceRegion::WORKSPACE && s.packCacheBytes > 0) {
      os << ", of which the bf16 pack cache ";
      printBytes(os, s.packCacheBytes);
    }
    os << "\n";
  }
  os << "  peak (the allocation): ";
  printBytes(os, s.deviceBytes);
  os << " of a budget of ";
  printBytes(os, s.gpuBudgetBytes);
  os << "\n";
}

static void printMoved(llvm::raw_ostream &os, const MemoryReport &m, const ScheduleReport &s) {
  os << "\nmoved per step (" << microBatches(m.microBatchesPerStep);
  if (m.microBatchesPerStep > 1)
    os << (m.passesPerStep == 1 ? " in one pass: each unit streams once" : " in " + std::to_string(m.passesPerStep) + " passes");
  os << "):\n";
  os << (s.momentsMove ? "  host to device (weights, AdamW moments):   " : "  host to device (weights):   ");
  printBytes(os, s.h2dBytesPerStep);
  if (s.bf16WeightBytes > 0) os << " (the weights only products read as bf16)";
  os << (s.momentsMove ? "\n  device to host (gradients, weights, moments): " : "\n  device to host (gradients): ");
  printBytes(os, s.d2hBytesPerStep);
  if (s.checkpointBytesPerPass > 0) {
    os << "\n  of which offloaded checkpoints, each way: ";
    printBytes(os, s.checkpointBytesPerPass * m.passesPerStep);
  }
  os << "\n";
}

static void printPrediction(llvm::raw_ostream &os, const ScheduleReport &s, int64_t passesPerStep, int gpus) {
  os << "\npredicted (cost model, profile: " << s.profileName << "), unvalidated:\n";
  if (!s.predicted) {
    os << "  not available: " << s.predictionError << "\n";
    return;
  }
  const StepPrediction &pr = s.prediction;
  os << "  step time: " << seconds(pr.stepSeconds) << " per " << (s.microBatchesPerPass > 1 ? "pass of " + std::to_string(s.microBatchesPerPass) + " micro-batches" : std::string("micro-batch"))
     << " (" << s.actions << " actions)\n";
  if (gpus > 1) {
    const double passes = double(passesPerStep) * pr.stepSeconds;
    if (s.stepSecondsAllGpus > 0)
      os << "  a step on " << gpus << " GPUs at once: at least " << seconds(double(passesPerStep) * s.stepSecondsAllGpus)
         << " (each GPU's " << passesPerStep << (passesPerStep == 1 ? " pass" : " passes") << ", its copies at "
         << llvm::format("%.0f", 100 * s.gpuCopyShare)
         << "% of one GPU's rate: the profile's copies to and from every GPU at once; the host's sums of their "
            "gradients are not modelled)\n";
    else
      os << "  a step on " << gpus << " GPUs at once: at least " << seconds(passes) << " (each GPU's " << passesPerStep
         << (passesPerStep == 1 ? " pass" : " passes") << " at one GPU's rates: the profile did not measure copies to "
         << "and from " << gpus << " GPUs at once, which share the host's memory; the host's sums of their gradients "
         << "are not modelled)\n";
    os << "  this megac runs the GPUs' shares one after another on one device: at least "
       << seconds(double(gpus) * passes) << " a step\n";
  } else if (passesPerStep > 1) {
    os << "  a step of " << passesPerStep << " passes: at least " << seconds(double(passesPerStep) * pr.stepSeconds)
       << " (the host's sums between the passes and its AdamW are not modelled)\n";
  }
  os << "  busy:";
  for (int lane = 0; lane < kNumLanes; ++lane)
    os << (lane ? ", " : " ") << laneName(lane) << " " << seconds(pr.laneBusy[lane]);
  os << "\n  critical path:";
  for (int lane = 0; lane < kNumLanes; ++lane)
    os << (lane ? ", " : " ") << laneName(lane) << " " << seconds(pr.criticalPath[lane]);
  os << "\n  bottleneck: " << laneName(pr.bottleneck) << "\n";
  os << "  TFLOPS: " << llvm::format("%.2f", pr.tflops)
     << (s.microBatchesPerPass > 1 ? " (6 x parameters x batch x seq x micro-batches / step time)\n" : " (6 x parameters x batch x seq / step time)\n");
  os << "  device memory in use: peak ";
  printBytes(os, pr.peakMemoryBytes);
  os << "\n";
}

void printPlanReport(const Plan &p, const PlanReport &r, const std::string &planPath, llvm::raw_ostream &os) {
  const MemoryReport &m = r.memory;
  os << "plan: " << planPath << "\n";
  os << "  model: " << p.model_path() << "\n";
  os << "  batch x seq: " << p.batch() << " x " << p.seq() << "\n";
  os << "  vocab: " << p.vocab() << "\n";
  os << "  compute: " << p.compute() << "\n";
  int64_t keeping = 0, savedBytes = 0;
  for (const UnitReport &u : r.units) keeping += u.keepsActivations, savedBytes += u.savedBytes;
  if (keeping == 0) os << "  recompute: every unit recomputes its forward in the backward\n";
  else
    os << "  recompute: " << keeping << " of " << r.units.size() << " units keep their activations (" << savedBytes
       << " bytes saved), the others recompute\n";
  if (r.sequenceChunks > 1)
    os << "  sequence chunks: each unit's MLP block runs over " << r.sequenceChunks
       << " slices of the sequence in turn (--seq-chunks; its intermediates take that much less GPU memory)\n";
  int64_t resident = 0, residentParams = 0;
  for (const UnitReport &u : r.units)
    if (u.resident) ++resident, residentParams += u.parameters;
  if (resident == 0) os << "  resident units: none (every unit streams its weights)\n";
  else
    os << "  resident units: " << resident << " of " << r.units.size() << " (" << residentParams
       << " parameters whose weights and AdamW moments stay on the GPU and step there)\n";
  int64_t onGpu = 0, onGpuParams = 0;
  for (const UnitReport &u : r.units)
    if (u.adamwOnGpu) ++onGpu, onGpuParams += u.parameters;
  if (onGpu)
    os << "  AdamW on the GPU: " << onGpu << " streamed " << (onGpu == 1 ? "unit" : "units") << " (" << onGpuParams
       << " parameters whose moments come in with their weights in the backward, step there and go back)\n";
  if (p.has_schedule())
    os << "  steps overlap: "
       << (p.schedule().overlap_steps() ? "yes (a step ends with the GPU; its host AdamW runs on beside the next step's "
                                          "forward, whose first copy of each unit waits for that unit's update)"
                                        : "no (a step ends when the host's AdamW has updated every unit)")
       << "\n";
  {
    const std::vector<bool> stepsEarly = unitsSteppingUnreadRowsEarly(p);
    std::vector<std::string> early;
    for (int u = 0; u < p.units_size(); ++u)
      if (stepsEarly[size_t(u)]) early.push_back(p.units(u).name());
    if (!early.empty())
      os << "  unread rows early: " << llvm::join(early, ", ")
         << " (the host steps the token table's rows no token of the step reads once the forward has copied it; "
            "its update after the backward steps only the rows read)\n";
  }
  if (r.memory.gpus > 1)
    os << "  GPUs: " << r.memory.gpus << " (each runs " << r.memory.microBatchesPerStep << " micro-batch"
       << (r.memory.microBatchesPerStep == 1 ? "" : "es") << " of the step's " << r.memory.gpus * r.memory.microBatchesPerStep
       << "; the host sums their gradients, GPU by GPU, then takes one AdamW step)\n";
  if (p.has_schedule() && r.memory.microBatchesPerStep > 1) {
    const int perPass = passMicroBatches(p.schedule());
    os << "  accumulation: " << r.memory.microBatchesPerStep << " micro-batches a step, " << perPass << " a pass ("
       << (r.memory.passesPerStep == 1 ? std::string("one pass: each unit streams in once a step")
                                       : std::to_string(r.memory.passesPerStep) + " passes, the gradients summed on the host between them")
       << (perPass > 1 ? "; its gradients summed on the GPU over the pass's micro-batches" : "") << ")\n";
  }
  os << "  format version: " << p.format_version() << " (megac " << p.megac_version() << ")\n";

  os << "\nunits (" << r.units.size() << ", in forward order):\n";
  for (int i = 0; i < p.units_size(); ++i) {
    const Unit &u = p.units(i);
    const UnitReport &ur = r.units[size_t(i)];
    os << "  " << ur.name << ": template " << r.templates[size_t(ur.templateId)].name << ", " << ur.parameters
       << " parameters";
    if (ur.keepsActivations) os << ", keeps its activations (" << ur.savedBytes << " bytes saved)";
    if (ur.resident) os << ", resident";
    if (ur.adamwOnGpu) os << ", AdamW on the GPU";
    os << "\n";
    auto activations = [&](const char *label, const google::protobuf::RepeatedField<int32_t> &ids) {
      for (int32_t a : ids) {
        const Activation &act = p.activations(a);
        os << "    " << label << " " << act.name() << " " << typeString(act.type()) << " (" << kindName(act.kind())
           << ")\n";
      }
    };
    activations("in: ", u.activation_inputs());
    activations("out:", u.activation_outputs());
  }

  os << "\ntemplates (" << r.templates.size() << "):\n";
  for (const TemplateReport &t : r.templates) {
    os << "  " << t.name << ": " << t.units << (t.units == 1 ? " unit" : " units") << ", forward " << t.forwardOps
       << " ops, backward " << t.backwardOps << " ops, constants " << t.forwardConstantBytes
       << " bytes (forward) + " << t.backwardConstantBytes << " bytes (backward)\n";
    os << "    backward ops:";
    const char *sep = " ";
    for (const auto &[type, count] : t.backwardOpHistogram) {
      os << sep << type << " " << count;
      sep = ", ";
    }
    os << "\n";
    if (t.keptBackwardOps >= 0)
      os << "    units that keep their activations run backward_kept: " << t.keptBackwardOps
         << " ops (no recomputation)\n";
  }

  os << "\nparameters: " << m.parameters << " total\n";
  for (const UnitReport &u : r.units) os << "  " << u.name << ": " << u.parameters << "\n";

  if (r.hasSchedule) printHostWithSchedule(os, m, r.schedule);
  else printHost(os, m);

  os << "\nactivation checkpoints (forward to backward, per micro-batch): ";
  printBytes(os, m.checkpointBytes);
  os << "\nlargest unit weights in fp32 (one weight slot): " << m.largestUnit << ", ";
  printBytes(os, m.largestUnitWeightBytes);
  os << "\n";
  if (r.hasSchedule) {
    printGpuMemory(os, r.schedule);
    printMoved(os, m, r.schedule);
    printPrediction(os, r.schedule, m.passesPerStep, m.gpus);
  } else {
    os << "\nstreamed per step (what the CPU backend does now; the plan has no GPU schedule):\n";
    os << "  weights in (forward + backward): ";
    printBytes(os, m.streamWeightsInBytes);
    os << " per micro-batch\n  gradients out:                   ";
    printBytes(os, m.streamGradientsOutBytes);
    os << " per micro-batch\n  per step (" << microBatches(m.microBatchesPerStep) << "): ";
    printBytes(os, m.streamBytesPerStep);
    os << "\n";
  }

  const Optimizer &o = p.optimizer();
  os << "\noptimizer: AdamW\n";
  os << "  lr " << num(o.lr()) << ", schedule " << o.schedule() << ", warmup " << o.warmup() << ", min-lr "
     << num(o.min_lr()) << "\n";
  os << "  betas " << num(o.beta1()) << ", " << num(o.beta2()) << ", eps " << num(o.eps()) << ", weight decay "
     << num(o.weight_decay()) << "\n";
  os << "  clip " << num(o.clip()) << (o.clip() > 0 ? "" : " (off)") << ", grad-accum " << m.microBatchesPerStep
     << ", no-decay " << (o.no_decay().empty() ? "(none)" : "'" + o.no_decay() + "'") << "\n";
}

// Names come from the model file; JSON needs valid UTF-8.
static std::string utf8(const std::string &s) { return llvm::json::isUTF8(s) ? s : llvm::json::fixUTF8(s); }

static llvm::json::Value bytesJson(int64_t bytes) {
  return llvm::json::Object{{"bytes", bytes}, {"gib", gib(bytes)}};
}

static llvm::json::Value typeJson(const TensorType &t) {
  llvm::json::Array shape;
  for (int64_t d : t.shape()) shape.push_back(d);
  return llvm::json::Object{{"dtype", megac::dtypeName(megac::DType(int(t.dtype())))}, {"shape", std::move(shape)}};
}

// Category names as JSON keys: "weight_slots", ...
static std::string jsonKey(const char *name) {
  std::string k = name;
  std::replace(k.begin(), k.end(), ' ', '_');
  return k;
}

static llvm::json::Value gpuMemoryJson(const ScheduleReport &s) {
  llvm::json::Object categories;
  for (const DeviceCategory &c : s.device)
    categories[jsonKey(deviceCategoryName(c.kind))] = llvm::json::Object{
        {"bytes", c.footprintBytes}, {"gib", gib(c.footprintBytes)}, {"regions", c.regions}, {"sum_bytes", c.sumBytes}};
  return llvm::json::Object{{"categories", std::move(categories)},
                            {"peak", bytesJson(s.deviceBytes)},
                            {"budget", bytesJson(s.gpuBudgetBytes)},
                            {"weight_slots", s.weightSlots},
                            {"grad_slots", s.gradSlots},
                            {"weight_slot_bytes", s.weightSlotBytes},
                            {"grad_slot_bytes", s.gradSlotBytes},
                            {"small_grad_slots", s.smallGradSlots},
                            {"small_grad_slot_bytes", s.smallGradSlotBytes},
                            {"pack_cache_bytes", s.packCacheBytes}};
}

static llvm::json::Value predictionJson(const ScheduleReport &s) {
  llvm::json::Object o{{"label", "predicted (cost model, profile: " + utf8(s.profileName) + "), unvalidated"},
                       {"profile", utf8(s.profileName)},
                       {"available", s.predicted},
                       {"actions", s.actions}};
  if (!s.predicted) {
    o["error"] = utf8(s.predictionError);
    return o;
  }
  const StepPrediction &pr = s.prediction;
  llvm::json::Object busy, path;
  for (int lane = 0; lane < kNumLanes; ++lane) {
    busy[laneName(lane)] = pr.laneBusy[lane];
    path[laneName(lane)] = pr.criticalPath[lane];
  }
  o["step_seconds"] = pr.stepSeconds;
  o["per"] = "micro-batch";
  o["lane_busy_seconds"] = std::move(busy);
  o["critical_path_seconds"] = std::move(path);
  o["bottleneck"] = laneName(pr.bottleneck);
  o["tflops"] = pr.tflops;
  o["model_flops"] = pr.modelFlops;
  o["peak_memory_in_use"] = bytesJson(pr.peakMemoryBytes);
  // Several GPUs: a GPU's pass while all copy at once (absent where the profile did not measure that many).
  if (s.gpuCopyShare > 0) o["gpu_copy_share"] = s.gpuCopyShare, o["step_seconds_all_gpus_at_once"] = s.stepSecondsAllGpus;
  return o;
}

void printPlanReportJson(const Plan &p, const PlanReport &r, const std::string &planPath, llvm::raw_ostream &os) {
  const MemoryReport &m = r.memory;
  auto activations = [&](const google::protobuf::RepeatedField<int32_t> &ids) {
    llvm::json::Array out;
    for (int32_t a : ids) {
      const Activation &act = p.activations(a);
      out.push_back(llvm::json::Object{{"name", utf8(act.name())}, {"kind", kindName(act.kind())}, {"type", typeJson(act.type())}});
    }
    return out;
  };
  llvm::json::Array units;
  const std::vector<bool> stepsEarly = unitsSteppingUnreadRowsEarly(p);
  for (int i = 0; i < p.units_size(); ++i) {
    const UnitReport &ur = r.units[size_t(i)];
    units.push_back(llvm::json::Object{{"name", utf8(ur.name)},
                                       {"template", utf8(r.templates[size_t(ur.templateId)].name)},
                                       {"template_id", ur.templateId},
                                       {"parameters", ur.parameters},
                                       {"weight_bytes", ur.weightBytes},
                                       {"keeps_activations", ur.keepsActivations},
                                       {"resident", ur.resident},
                                       {"adamw_on_gpu", ur.adamwOnGpu},
                                       {"unread_rows_early", bool(stepsEarly[size_t(i)])},
                                       {"saved_bytes", ur.savedBytes},
                                       {"inputs", activations(p.units(i).activation_inputs())},
                                       {"outputs", activations(p.units(i).activation_outputs())}});
  }
  llvm::json::Array templates;
  for (const TemplateReport &t : r.templates) {
    llvm::json::Object hist;
    for (const auto &[type, count] : t.backwardOpHistogram) hist[utf8(type)] = count;
    templates.push_back(llvm::json::Object{{"name", utf8(t.name)},
                                           {"units", t.units},
                                           {"forward_ops", t.forwardOps},
                                           {"backward_ops", t.backwardOps},
                                           {"backward_op_histogram", std::move(hist)},
                                           {"forward_constant_bytes", t.forwardConstantBytes},
                                           {"backward_constant_bytes", t.backwardConstantBytes}});
  }
  llvm::json::Array perUnit;
  for (const UnitReport &u : r.units) perUnit.push_back(llvm::json::Object{{"unit", utf8(u.name)}, {"parameters", u.parameters}});
  const Optimizer &o = p.optimizer();
  llvm::json::Object root{
      {"plan", utf8(planPath)},
      {"model", utf8(p.model_path())},
      {"batch", p.batch()},
      {"seq", p.seq()},
      {"vocab", p.vocab()},
      {"compute", utf8(p.compute())},
      {"sequence_chunks", r.sequenceChunks},
      {"format_version", int64_t(p.format_version())},
      {"megac_version", utf8(p.megac_version())},
      {"overlap_steps", p.has_schedule() && p.schedule().overlap_steps()},
      {"micro_batches_per_pass", p.has_schedule() ? int64_t(passMicroBatches(p.schedule())) : int64_t(1)},
      {"gpus", int64_t(m.gpus)},
      {"units", std::move(units)},
      {"templates", std::move(templates)},
      {"parameters", llvm::json::Object{{"total", m.parameters}, {"per_unit", std::move(perUnit)}}},
      {"host_memory",
       llvm::json::Object{{"master_weights", bytesJson(m.masterWeightBytes)},
                          {"adam_moments", bytesJson(m.adamMomentBytes)},
                          {"gradients", bytesJson(m.gradientBytes)},
                          {"keeps_gradients", m.keepsGradients},
                          {"total", bytesJson(m.hostBytes)},
                          {"bytes_per_parameter", m.bytesPerParameter}}},
      {"activation_checkpoints_per_micro_batch", bytesJson(m.checkpointBytes)},
      {"largest_unit_weights", llvm::json::Object{{"unit", utf8(m.largestUnit)},
                                                  {"bytes", m.largestUnitWeightBytes},
                                                  {"gib", gib(m.largestUnitWeightBytes)}}},
      {"optimizer", llvm::json::Object{{"name", "AdamW"},
                                       {"lr", shortest(o.lr())},
                                       {"schedule", utf8(o.schedule())},
                                       {"warmup", o.warmup()},
                                       {"min_lr", shortest(o.min_lr())},
                                       {"beta1", shortest(o.beta1())},
                                       {"beta2", shortest(o.beta2())},
                                       {"eps", shortest(o.eps())},
                                       {"weight_decay", shortest(o.weight_decay())},
                                       {"clip", shortest(o.clip())},
                                       {"grad_accum", m.microBatchesPerStep},
                                       {"no_decay", utf8(o.no_decay())},
                                       {"seed", o.seed()}}},
  };
  if (r.hasSchedule) {
    const ScheduleReport &sr = r.schedule;
    llvm::json::Object *host = root.getObject("host_memory");
    (*host)["pinned_staging"] = bytesJson(sr.pinnedStagingBytes);
    (*host)["pinned_checkpoints"] = bytesJson(sr.pinnedCheckpointBytes);
    (*host)["bf16_weights"] = bytesJson(sr.bf16WeightBytes);
    (*host)["offloaded_checkpoints"] = sr.offloadedCheckpoints;
    (*host)["offloaded_checkpoint_units"] = sr.offloadedUnits;
    (*host)["total"] = bytesJson(sr.hostBytes);
    (*host)["bytes_per_parameter"] = sr.bytesPerParameter;
    root["gpu_memory"] = gpuMemoryJson(sr);
    root["moved_per_step"] = llvm::json::Object{{"micro_batches", m.microBatchesPerStep},
                                                {"passes", m.passesPerStep},
                                                {"host_to_device", bytesJson(sr.h2dBytesPerStep)},
                                                {"device_to_host", bytesJson(sr.d2hBytesPerStep)},
                                                {"host_to_device_per_pass", bytesJson(sr.h2dBytesPerPass)},
                                                {"device_to_host_per_pass", bytesJson(sr.d2hBytesPerPass)}};
    root["prediction"] = predictionJson(sr);
  } else {
    root["streamed"] = llvm::json::Object{
        {"note", "what the CPU backend does now; the plan has no GPU schedule"},
        {"weights_in_per_micro_batch", bytesJson(m.streamWeightsInBytes)},
        {"gradients_out_per_micro_batch", bytesJson(m.streamGradientsOutBytes)},
        {"micro_batches_per_step", m.microBatchesPerStep},
        {"per_step", bytesJson(m.streamBytesPerStep)}};
  }
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

} // namespace megac::plan
