#pragma once
// The cost model: predicts how long one step of a plan's streaming schedule
// takes on a machine described by a profile (codegen/MachineProfile.h).
//
// Each action gets a duration from the work it does and the profile's rates:
//   PREFETCH  the unit's fp32 weights in their slot layout / PCIe H2D (H2D
//             and D2H running at the same time share pcie_both_gbps, in
//             proportion to their own rates);
//   OFFLOAD   the unit's fp32 gradients, same layout / PCIe D2H (shared likewise);
//   FETCH_MOMENTS, WRITEBACK  twice and three times a PREFETCH's bytes (m, v;
//             weights, m, v) over H2D and D2H;
//   SAVE_CHECKPOINT, LOAD_CHECKPOINT  the checkpoint's bytes over D2H and H2D;
//   UPDATE    the parameters it updates (a tied one with its lowest-numbered
//             unit, the last to add to its gradient) / CPU AdamW parameters/s;
//             a resident or adamw_on_gpu unit's (compute stream): 28 bytes
//             per parameter / HBM bandwidth;
//   FORWARD,  GEMM flops / the GEMM rate of the plan's compute mode, plus the
//   BACKWARD  bytes the other ops read and write / HBM bandwidth.
// Then a discrete-event simulation runs the action list over four lanes (H2D,
// compute, D2H, CPU), each in issue order, every action starting once its lane
// is free and the latest record (at issue time) of each event it waits for
// has completed. A GPU action that waits for an event recorded by a CPU
// action blocks the host thread, which issues nothing after it until then.
// Kernel launch overheads and PCIe latency are not modelled. Predictions
// only: unvalidated until measured on the GPU.
#include "codegen/MachineProfile.h"
#include "runtime/plan/PlanIO.h"
#include "runtime/plan/PlanLabels.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <string>
#include <vector>

namespace megac::plan {

// The work of one program.
struct ProgramWork {
  double gemmFlops = 0;      // MatMul and Gemm
  double attentionFlops = 0; // Attention and megac.AttentionGrad where they run fused
  // Elements of their Q (twice for a gradient): their work beyond the flops.
  // (On materialized scores they count as GEMM flops and memory bytes.)
  double attentionElements = 0;
  double memoryBytes = 0; // bytes read + written by every other op (view ops: none)
};
// Argument positions [begin, end) of a program whose bf16 copies the runtime
// made beforehand (a streamed unit's parameters, where the plan has bf16
// weight copies: StreamSchedule.weight_copy_bytes): products read them
// without packing.
// `packCacheBytes`: the plan's bf16 pack cache (StreamSchedule.pack_cache_bytes):
// an operand that a product stored there is not packed again
// (runtime/plan/PackCache.h).
struct CopiedArguments {
  int begin = 0, end = 0;
  int64_t packCacheBytes = 0;
};
// The parameters of `unit`'s programs where the plan copies its weight slots
// to bf16 and the unit streams; else none. With the plan's pack cache.
CopiedArguments copiedWeightArguments(const Plan &p, int unit);
// `bf16Operands`: bf16 plans, where the runtime packs each product's fp32
// operands to bf16 first (6 bytes moved per operand element, none for a
// `copied` argument) and runs attention fused where plan::runsFused says so.
llvm::Expected<ProgramWork> programWork(const Program &p, bool bf16Operands = false, CopiedArguments copied = {});
// The same walk, op by op: `each` gets every op of p and its own work (view
// ops of a TEMP and ops the model does not time: zero).
llvm::Error forEachOpWork(const Program &p, bool bf16Operands, CopiedArguments copied,
                          llvm::function_ref<void(const Program::Op &, const ProgramWork &)> each);

enum Lane : int { kLaneH2D = 0, kLaneCompute = 1, kLaneD2H = 2, kLaneCPU = 3 };
constexpr int kNumLanes = 4;
// Lanes are numbered like StreamAction::Stream.
const char *laneName(int lane); // "H2D", "compute", "D2H", "CPU"

// The rates the model uses, in bytes/s, flop/s and parameters/s.
struct CostRates {
  double h2dBytesPerS = 0, d2hBytesPerS = 0, bothBytesPerS = 0;
  double gemmFlopsPerS = 0;      // of the plan's compute mode
  double attentionFlopsPerS = 0; // bf16: the profile's attention rate; else the GEMM rate
  double attentionSecondsPerElement = 0; // bf16: attention_bf16_ps_per_elem / 3 (per ProgramWork element)
  double hbmBytesPerS = 0;
  double adamwParamsPerS = 0;
  // While the CPU AdamW and pinned copies run at once (they share host
  // memory): the factor of the AdamW rate, and of each copy's rate. 1 where
  // the profile did not measure it.
  double adamwUnderDmaFactor = 1, dmaUnderAdamwFactor = 1;
};
// Fails on an unknown compute mode or a non-positive rate. `gpusAtOnce`: the
// GPUs copying at the same time (a --gpus plan's), each at
// gpuCopyShare(m, gpusAtOnce) of its PCIe rates.
llvm::Expected<CostRates> costRates(const MachineProfile &m, const std::string &computeMode, int gpusAtOnce = 1);
// The part of one GPU's both-way copy rate each of `gpus` GPUs gets when all
// copy at once: pcie_all_gpus_both_gbps / gpus over pcie_both_gbps, at most 1;
// 1 for one GPU. 0 where the profile did not measure that many GPUs at once.
double gpuCopyShare(const MachineProfile &m, int gpus);
// Seconds the GPU spends on a program's work at these rates, alone.
inline double programSeconds(const ProgramWork &w, const CostRates &r) {
  return w.gemmFlops / r.gemmFlopsPerS + w.attentionFlops / r.attentionFlopsPerS +
         w.attentionElements * r.attentionSecondsPerElement + w.memoryBytes / r.hbmBytesPerS;
}

struct ActionTiming {
  int lane = 0;
  double start = 0, end = 0; // seconds from the start of the step
  // What the action does: PREFETCH/OFFLOAD bytes; FORWARD/BACKWARD flops and
  // memory-bound bytes; UPDATE parameters.
  int64_t transferBytes = 0;
  double gemmFlops = 0, attentionFlops = 0, memoryBytes = 0;
  int64_t parameters = 0;
  double alone = 0; // its duration on an otherwise idle machine
};

// Device memory in use from `time` until the next point's time (the union of
// the byte ranges of the regions live then).
struct MemoryPoint {
  double time = 0;
  int64_t bytes = 0;
};

struct StepPrediction {
  CostRates rates;
  double stepSeconds = 0;
  double laneBusy[kNumLanes] = {};     // seconds each lane works
  double criticalPath[kNumLanes] = {}; // seconds of the critical path spent on each lane
  int bottleneck = kLaneCompute;       // the lane with the most critical-path time
  std::vector<ActionTiming> actions;   // one per schedule action, same order
  std::vector<MemoryPoint> memory;     // from time 0; the last point is at stepSeconds
  int64_t peakMemoryBytes = 0;         // the largest point of `memory`
  int64_t h2dBytes = 0, d2hBytes = 0;  // moved over the step's action list
  double modelFlops = 0;               // 6 * total_parameters * batch * seq
  double tflops = 0;                   // modelFlops / stepSeconds / 1e12
};

// Needs p.has_schedule(). Fails on dangling ids (units, events, actions).
// `gpusAtOnce`: one GPU's pass while that many copy at once (costRates).
llvm::Expected<StepPrediction> predictStep(const Plan &p, const MachineProfile &m, int gpusAtOnce = 1);

// One micro-batch as a run measured it: `times` holds each schedule action's
// (start, end) in seconds from the micro-batch's start (an action that did
// not run: (0, 0)). Step time, lane busy, critical path (each action held by
// whichever of its lane predecessor and the actions it waited for ended
// last), device memory over time and TFLOPS follow from them; each action's
// work (bytes, flops, parameters) and `alone` are the model's.
llvm::Expected<StepPrediction> measuredStep(const Plan &p, const MachineProfile &m,
                                            const std::vector<std::pair<double, double>> &times);

// The GPU time one step spends in each op type as the model predicts it
// (every op alone, nothing overlapped), labelled as `megac run --op-profile`
// labels its measured times: the op type, with " (backward)" for the ops of
// backward programs (which recompute the forward). Most time first.
llvm::Expected<std::vector<OpTypeTime>> predictOpTimes(const Plan &p, const MachineProfile &m);

} // namespace megac::plan
