#pragma once
// The plan checker (issue 4): proves a compiled plan's memory plan and
// streaming schedule safe before anything runs. It runs at the end of
// `megac compile` and when the runtime reads a plan that has a schedule.
//
// It proves:
// - no two live buffers overlap: device regions whose lifetimes (action
//   indices) overlap have disjoint bytes, and so do the values of each
//   program's arena whose lifetimes (op indices; ArenaRules.h's rules)
//   overlap, except a view sharing its input's bytes at the same offset;
// - every read comes after its producer or prefetch event: simulating the
//   actions in issue order, each FORWARD/BACKWARD of unit u on weight slot k
//   waits w<k>.ready whose latest record is the PREFETCH of u into k (the
//   forward's PREFETCH where the weights are still resident); OFFLOAD waits
//   g<g>.ready recorded by the BACKWARD of its unit; UPDATE waits s<g>.ready
//   recorded by its OFFLOAD; an adamw_on_gpu unit's UPDATE waits g<g>.ready
//   of its BACKWARD and m<k>.ready of its FETCH_MOMENTS, and its WRITEBACK
//   waits m<k>.ready of that UPDATE; activations and their gradients are
//   written before they are read, and the regions' lifetimes cover those actions;
// - with several micro-batches a pass (StreamSchedule.micro_batches), each
//   unit has a FORWARD and a BACKWARD of each, and each micro-batch its own
//   activation regions; a BACKWARD of micro-batch m > 0 adds to the grad slot
//   right after the unit's BACKWARD of m-1 (nothing read the slot between),
//   and what reads the slot (OFFLOAD, a GPU UPDATE) waits the unit's last;
// - a slot is reused only after its last consumer's event: a PREFETCH into
//   weight slot k waits w<k>.free recorded by the last compute that read k
//   (or the WRITEBACK of an adamw_on_gpu unit, which must come first);
//   a FETCH_MOMENTS into moment slot k waits m<k>.free of its last WRITEBACK;
//   a BACKWARD into grad slot g waits g<g>.free of the last OFFLOAD of g (and
//   that OFFLOAD was of the previous BACKWARD into g); an OFFLOAD into
//   staging slot s waits s<s>.free of the last UPDATE of s (likewise);
// - where steps overlap (StreamSchedule.overlap_steps: the host's AdamW of a
//   step runs on beside the next step), the next step cannot read what it
//   writes: the first PREFETCH of each unit waits "u<v>.updated" of every
//   unit v sharing a parameter with it that steps on the host, whose last
//   record in the action list is v's UPDATE (only that UPDATE records it),
//   and the first OFFLOAD into each staging slot waits its `free` event,
//   last recorded by the slot's last UPDATE;
// - an offloaded checkpoint (SAVE_CHECKPOINT / LOAD_CHECKPOINT, plan.proto's
//   StreamSchedule.pinned_checkpoint_bytes) goes out once and comes back
//   once, to and from the same host bytes, which no other checkpoint's
//   overlap: the SAVE waits an event of the FORWARD that wrote it; a compute
//   action waits the SAVE before the LOAD is issued (the first such action
//   ends the CHECKPOINT region's lifetime); the LOAD waits an event of the
//   compute stream's last action before it (every region its bytes may
//   reuse has been read); each BACKWARD reading it waits the LOAD, and reads
//   its LOADED_CHECKPOINT region, whose lifetime covers the LOAD and them;
// - the peak (device_bytes) stays within gpu_budget_bytes.
//
// The error names the violation kind first ("arena overlap", "region
// overlap", "missing wait", "read before prefetch", "read before write",
// "slot reused early", "region lifetime", "region size", "over budget",
// "malformed plan", "optimizer"), then the action index, unit, region or value names.
#include "runtime/plan/PlanIO.h"

namespace megac::plan {

// Plans without a schedule (CPU only) are checked for their arenas alone,
// where they have them; every plan for its optimizer (checkOptimizer).
llvm::Error checkPlan(const Plan &p);

// AdamW's hyperparameters in range ("optimizer" errors, naming the field):
// lr, min_lr, weight_decay and clip finite and >= 0, beta1 and beta2 in
// [0, 1), eps finite and > 0, warmup and grad_accum >= 0, the schedule
// "constant", "cosine" or empty.
llvm::Error checkOptimizer(const Optimizer &o);

// One program's arena alone; `what` names it in messages ("template 'x' forward").
llvm::Error checkArena(const Program &prog, const std::string &what);

// The checker's own account of when each value of a program lives, computed
// apart from the planner's (codegen/MemoryPlan.h computeLifetimes), so that a
// lifetime bug there cannot fool both: ops read their inputs at their index
// and write their outputs there; a value lives from its writer to its last
// reader, results to the end (index ops_size()); a view (ArenaRules.h's
// isViewOp) of a temporary of the same size may share its bytes and starts
// from the same root. Sizes and the view rule are the plan format's
// (ArenaRules.h); the sweeps are the checker's own. PlanCheckerTest checks
// that the two agree on every fixture plan.
struct ArenaLife {
  bool temp = false;   // written by an op: lives in the arena
  int32_t def = -1;    // the op writing it
  int32_t last = -1;   // its last reader (ops_size() for a result; def if never read)
  int32_t root = -1;   // the temporary whose bytes it uses
  int64_t bytes = 0;   // rounded up to 256
};
llvm::Expected<std::vector<ArenaLife>> arenaLifetimes(const Program &prog);

} // namespace megac::plan
