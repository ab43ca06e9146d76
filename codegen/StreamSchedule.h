#pragma once
// The streaming schedule of one pass of a step (issue 4): which stream does
// what in which order, the events that link them, and where each device
// buffer lives (Plan.schedule; plan.proto says what the runtime does with it).
#include "codegen/MachineProfile.h"
#include "runtime/plan/PlanIO.h"

#include <vector>

namespace megac::codegen {

// Which units recompute their forward in the backward (codegen/RecomputePolicy.h).
enum class Recompute {
  All,  // every unit recomputes from its input checkpoint (the least memory; the default)
  Auto, // keep the activations of as many units as the GPU budget holds, the most recompute saved per byte first
  None, // every unit keeps its activations (over budget is an error)
};

// --update-order (codegen/UpdateOrderPolicy.h).
enum class UpdateOrder {
  Arrival, // each unit's host AdamW as its gradients arrive
  Auto,    // the cost model's earliest-needed-first order where it is faster, with the grad slots it needs
};

struct ScheduleOptions {
  int weightSlots = 2; // K >= 2: prefetch runs K-1 units ahead of compute (-1: auto, codegen/WeightSlotsPolicy.h)
  int gradSlots = 2;   // also the number of pinned host staging slots
  // Past the first two, the grad (and staging) slots' size (plan.proto's
  // small_grad_slots): -1, auto: the third largest unit's gradients where
  // one or two units are much larger than the rest; 0: every slot the
  // largest unit's; > 0: that many bytes.
  int64_t smallGradSlotBytes = -1;
  int64_t gpuBudgetBytes = plan::MachineProfile().usableGpuBytes(); // --gpu-mem
  int64_t hostBudgetBytes = 0; // --host-mem; 0: not checked
  // Where --host-mem is not given, the host memory that a policy weighing
  // host bytes against speed (codegen/WeightStreamPolicy.h) plans within:
  // the compiling machine's available memory (megac compile sets it); 0: not checked.
  int64_t autoHostBudgetBytes = 0;
  Recompute recompute = Recompute::All; // --recompute
  int residentUnits = 0;                 // --resident-units: units kept on the GPU, the first ones (-1: auto; codegen/ResidentPolicy.h)
  int gpuAdamwUnits = 0;                 // --gpu-adamw-units: streamed units stepped on the GPU, the first ones (-1: auto; codegen/GpuAdamwPolicy.h)
  plan::MachineProfile profile;          // the rates the recompute policy weighs units by (--profile)
  // --overlap-steps: the host's AdamW of a step runs on beside the next
  // step's forward (plan.proto's StreamSchedule.overlap_steps).
  bool overlapSteps = true;
  // --unread-rows-early: the host steps the rows of each token-indexed table
  // that no token of the step reads once the forward's PREFETCH has copied it
  // (StreamAction.UPDATE_UNREAD_ROWS, runtime/plan/TokenRows.h).
  bool unreadRowsEarly = true;
  // --bf16-weight-copies (off by default): in bf16 plans, a bf16 copy beside each weight slot
  // (2 bytes a parameter), packed once per PREFETCH, so that a unit's
  // products read its weights as bf16 instead of packing them each time
  // (plan.proto's StreamSchedule.weight_copy_bytes). No effect in other plans.
  bool bf16WeightCopies = false;
  // --pack-cache (on by default): in bf16 plans, a region of the WORKSPACE
  // where a program's products keep the bf16 copies of operands that a later
  // product reads again (plan.proto's StreamSchedule.pack_cache_bytes,
  // runtime/plan/PackCache.h). The compiler adds it after the policies
  // (addPackCache): they plan without it.
  bool packCache = true;
  // --bf16-weight-stream on (auto, the default, is compile's policy below): in bf16 plans, the parameters that
  // only products read, of units that stream and step on the host, cross PCIe
  // as bf16, which the host's AdamW writes beside the masters (2 more host
  // bytes a parameter; plan.proto's Parameter.streams_bf16). Implies the
  // weight copies above.
  bool bf16WeightStream = false;
  bool bf16WeightStreamAuto = false; // --bf16-weight-stream auto: compile's policy sets the above (codegen/WeightStreamPolicy.h)
  // The order of the host's AdamW UPDATEs, as units (codegen/UpdateOrderPolicy.h):
  // each waits, its gradients held in their staging slot, until the units
  // before it have had theirs. Empty: in the order the gradients arrive.
  std::vector<int> hostUpdateOrder;
  UpdateOrder updateOrder = UpdateOrder::Arrival; // what compile's policy does (sets the two above)
  // --micro-batches-per-pass: micro-batches each pass carries through every
  // unit (layer-major accumulation); divides the plan's grad_accum (-1: auto,
  // codegen/MicroBatchPolicy.h).
  int microBatches = 1;
  // --offload-checkpoints: the boundary checkpoints of the first N units go
  // to pinned host memory after their forward and come back before their
  // backward (plan.proto's StreamSchedule.pinned_checkpoint_bytes); each
  // micro-batch's where the schedule leaves time for the copies (not the
  // last units': their checkpoints are read again right away). 0: none;
  // -1: auto (codegen/CheckpointOffloadPolicy.h; the schedule is built with none).
  int offloadCheckpoints = 0;
  // --gpus: the GPUs of one host a step runs on (plan.proto's Plan.gpus),
  // each over its own grad_accum micro-batches, their gradients summed on
  // the host. Over 1, no unit is resident or steps on a GPU.
  int gpus = 1;
};

// ScheduleOptions.smallGradSlotBytes auto, from every unit's gradient bytes:
// the third largest, where at most a quarter of the units are larger (an
// embedding and a head whose vocabulary makes them the largest) and it is at
// most 3/4 of the largest; else 0 (every grad slot the largest unit's). The
// slots past the first two then take that much less GPU and pinned host
// memory, and hold the other units' gradients while they wait for the
// host's AdamW (the 8B at 8 x 2048: 2.0 GiB slots for the embedding and the
// head, 0.8 GiB for the layers).
int64_t autoSmallGradSlotBytes(std::vector<int64_t> unitBytes);

// Fills plan.schedule from the units' resident and keep_activations choices.
// Needs the programs' arenas (assignArenas first).
// Does not enforce the budget: device_bytes may exceed it (compile reports that).
llvm::Error buildStreamSchedule(plan::Plan &plan, const ScheduleOptions &opts);

// Places the schedule's regions (offsets, device_bytes): intervals of
// actions sharing bytes where their lifetimes do not overlap.
void placeRegions(plan::StreamSchedule &s);

// The bf16 pack cache (runtime/plan/PackCache.h) in a scheduled plan's
// WORKSPACE region: what its programs need (plan::packCacheNeedBytes), or,
// where that passes the GPU budget, what the budget leaves, or none; then
// the regions placed again. Compile adds it after every policy, so that
// none of them gives up GPU memory for it; nothing in plans that are not bf16.
void addPackCache(plan::Plan &plan);

} // namespace megac::codegen
