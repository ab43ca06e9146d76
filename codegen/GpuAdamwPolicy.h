#pragma once
// The GPU-AdamW policy: which streamed units bring their fp32 AdamW moments to
// the GPU beside their weights in the backward, step there, and write weights
// and moments back (Unit.adamw_on_gpu), instead of sending their gradients to
// the host's AdamW.
//
// Backward runs the units in reverse, so the host's AdamW of the first units
// comes last, and where the CPU lane is longer than the backward it is the
// step's tail: the next forward needs exactly those units first. Stepping them
// on the GPU takes them off the CPU at 20 bytes per parameter over PCIe
// instead of 4 (moments in; weights and moments out, in place of the
// gradients) and two moment slots of GPU memory. The policy takes streamed
// units in forward order; units that share a parameter with another (tied
// weights sum their gradients on the host) or have none are not candidates.
#include "codegen/StreamSchedule.h"

namespace megac::codegen {

// "auto" -> -1, else a count >= 0.
llvm::Expected<int> parseGpuAdamwUnits(llvm::StringRef s);

// The streamed units whose AdamW may run on the GPU, in forward order.
std::vector<int> gpuAdamwCandidates(const plan::Plan &p);

// The gain auto's choice must be predicted over none: more than the model's
// error for streamed units stepped on the GPU, which it has favoured each
// time it was measured: the 2.8B bench's embedding predicted 0.9% faster,
// measured 5% slower (H200, 2026-12-05); the 8B all streamed with 8 units
// predicted as fast as none, measured 2% slower (H100, 2026-12-06 midday);
// with 5 units and the bf16 stream predicted 4.8% faster, measured 1.5%
// slower (2.564 against 2.526 s, H100, 2026-12-06 19:20; its copies of the
// moments made H2D the critical lane).
inline constexpr double kGpuAdamwMinGain = 0.07;

// The policies that run after this one (weight slots, the host's update
// order, the bf16 weight stream), applied to a plan and its options: what
// auto compares is each choice's step as they leave it, since they change it
// by more than the choice does (the update order takes the host's AdamW off
// the critical path, the bf16 stream halves the host-stepped units' copies).
using FinishPlan = llvm::function_ref<llvm::Error(plan::Plan &, ScheduleOptions &)>;

// Sets Unit.adamw_on_gpu on the first o.gpuAdamwUnits candidates and builds
// the schedule (after the resident policy: resident units are not
// candidates). Auto (-1): a run of candidates from the first or from the
// second (the embedding's moments may cost more over PCIe than its host
// AdamW), each count finished by `finish` and predicted; per start, the
// fewest whose step is within 0.5% of the fastest count that keeps the plan
// within 97% of the GPU budget; the start that predicts the shorter step;
// and none unless that step is predicted kGpuAdamwMinGain shorter than with
// none; none where the step keeps its gradients (--clip, --grad-accum,
// several GPUs), whose AdamW waits for the whole step. A count over the
// candidates is an error. The caller finishes the plan after this.
llvm::Error applyGpuAdamwPolicy(plan::Plan &p, const ScheduleOptions &o, FinishPlan finish);

} // namespace megac::codegen
