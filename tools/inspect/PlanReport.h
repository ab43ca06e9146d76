#pragma once
// A readable summary of a compiled plan (`megac plan`): its units and
// templates, parameter counts, and what training it costs in memory and
// transfers, and codegen's cost model's prediction of a step. Part of the
// inspection library (tools/inspect), which tools link; what the runtime
// needs of it (the host bill, the labels) is in runtime/plan.
#include "codegen/CostModel.h"
#include "runtime/plan/PlanIO.h"

#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>
#include <vector>

namespace megac::plan {

struct UnitReport {
  std::string name;
  int32_t templateId = -1;
  int64_t parameters = 0;  // elements of the parameters bound to the unit
  int64_t weightBytes = 0; // the same in fp32
  bool keepsActivations = false; // the recompute policy's choice (else: recomputes its forward)
  int64_t savedBytes = 0;        // GPU bytes of its saved values when it keeps them
  bool resident = false;         // the resident-unit policy's choice: weights and AdamW moments stay on the GPU
  bool adamwOnGpu = false;       // the GPU-AdamW policy's choice: streams, and its AdamW runs on the GPU
};

struct TemplateReport {
  std::string name;
  int64_t units = 0; // units that use it
  int64_t forwardOps = 0, backwardOps = 0;
  std::map<std::string, int64_t> backwardOpHistogram; // op type -> count
  // Bytes of the CONSTANT values' data in each program (the backward
  // recomputes the forward, so constants appear in both).
  int64_t forwardConstantBytes = 0, backwardConstantBytes = 0;
  int64_t keptBackwardOps = -1; // ops of backward_kept; -1 where no unit keeps its activations
};

// Memory and traffic of one optimizer step, in bytes.
struct MemoryReport {
  int64_t parameters = 0;
  // Host: fp32 master weights, AdamW m and v, and the step's gradients where
  // the step keeps them (clip > 0, or more than one pass: stepKeepsGradients).
  bool keepsGradients = false;
  int64_t masterWeightBytes = 0, adamMomentBytes = 0, gradientBytes = 0;
  int64_t hostBytes = 0;
  int64_t bytesPerParameter = 0;
  // Activation checkpoints kept between forward and backward, per
  // micro-batch: the distinct INTERMEDIATE activations that are unit inputs.
  int64_t checkpointBytes = 0;
  // The largest unit's weights in fp32: what one weight slot must hold.
  std::string largestUnit;
  int64_t largestUnitWeightBytes = 0;
  // Streaming each unit's weights in for forward and again for backward,
  // and its gradients out once, per micro-batch and per optimizer step.
  int64_t microBatchesPerStep = 1; // a GPU's (grad_accum)
  int64_t passesPerStep = 1; // grad_accum over the schedule's micro-batches per pass
  int gpus = 1;              // plan::planGpus: each runs microBatchesPerStep a step
  bool clipped = false;      // --clip: the AdamW waits for the global norm
  int64_t streamWeightsInBytes = 0; // per micro-batch, forward + backward
  int64_t streamGradientsOutBytes = 0;
  int64_t streamBytesPerMicroBatch = 0;
  int64_t streamBytesPerStep = 0;
};

// One kind of device region (weight slots, checkpoints, ...).
struct DeviceCategory {
  DeviceRegion::Kind kind = DeviceRegion::WEIGHT_SLOT;
  int64_t regions = 0;
  int64_t sumBytes = 0;       // the regions' bytes added up
  int64_t footprintBytes = 0; // the union of their byte ranges: regions sharing bytes count once
};

// What the streaming schedule costs (plans with a schedule only).
struct ScheduleReport {
  int32_t weightSlots = 0, gradSlots = 0;
  int64_t weightSlotBytes = 0, gradSlotBytes = 0;
  int32_t smallGradSlots = 0; // the last grad slots, of smallGradSlotBytes (StreamSchedule.small_grad_slots)
  int64_t smallGradSlotBytes = 0;
  int64_t actions = 0;
  int microBatchesPerPass = 1; // StreamSchedule.micro_batches (layer-major accumulation)
  // GPU: one allocation of deviceBytes (the peak the plan uses), cut into
  // regions; every DeviceRegion::Kind in enum order.
  std::vector<DeviceCategory> device;
  int64_t deviceBytes = 0, gpuBudgetBytes = 0;
  int64_t packCacheBytes = 0; // inside the workspace (StreamSchedule.pack_cache_bytes)
  // Host: fp32 master weights, AdamW m and v, the pinned gradient staging
  // slots, the offloaded checkpoints, and the step's gradients where they
  // are kept (MemoryReport).
  int64_t pinnedStagingBytes = 0;
  // Checkpoint offload: the pinned host memory of the offloaded checkpoints,
  // how many (activation, micro-batch) there are, of how many units, and the
  // bytes they move each way per pass (in h2d/d2hBytesPerPass too).
  int64_t pinnedCheckpointBytes = 0;
  int offloadedCheckpoints = 0, offloadedUnits = 0;
  int64_t checkpointBytesPerPass = 0;
  // Weights streamed as bf16 (runtime/plan/Bf16Weights.h): the host's bf16
  // copies (pinned) and the parameter elements they hold.
  int64_t bf16WeightBytes = 0, bf16Parameters = 0;
  int64_t hostBytes = 0;
  double bytesPerParameter = 0;
  // Bytes each way over PCIe: the schedule's PREFETCHes and OFFLOADs, and
  // (momentsMove: where a unit's AdamW runs on the GPU while it streams) its
  // FETCH_MOMENTS and WRITEBACKs.
  int64_t h2dBytesPerPass = 0, d2hBytesPerPass = 0;
  bool momentsMove = false;
  int64_t h2dBytesPerStep = 0, d2hBytesPerStep = 0;
  // The cost model's prediction for one micro-batch (absent, with the
  // reason, when it cannot simulate the schedule).
  std::string profileName;
  bool predicted = false;
  StepPrediction prediction;
  std::string predictionError;
  // Several GPUs: the part of its copy rate each GPU keeps when all copy at
  // once (0: the profile did not measure that many), and a pass at it.
  double gpuCopyShare = 0, stepSecondsAllGpus = 0;
};

struct PlanReport {
  int64_t sequenceChunks = 1; // plan::sequenceChunks: slices of the sequence the MLP blocks run over
  std::vector<UnitReport> units;
  std::vector<TemplateReport> templates;
  MemoryReport memory;
  bool hasSchedule = false;
  ScheduleReport schedule;
};

// `profile` drives the cost model where the plan has a schedule.
llvm::Expected<PlanReport> reportPlan(const Plan &p, const MachineProfile &profile = MachineProfile());

// `planPath` is the file the plan was read from (printed as is).
void printPlanReport(const Plan &p, const PlanReport &r, const std::string &planPath, llvm::raw_ostream &os);
void printPlanReportJson(const Plan &p, const PlanReport &r, const std::string &planPath, llvm::raw_ostream &os);

} // namespace megac::plan
