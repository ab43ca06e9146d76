#pragma once
// The CPU backend's training step through the plan's streaming schedule
// (issue 22): what runtime/cuda/CudaTrainer.cpp does on the GPU, on the CPU
// kernels, so that CI runs the mechanism megac exists for.
// - One simulated device allocation of the schedule's device_bytes (mapped
//   lazily), cut into the plan's regions at their offsets: weight and grad
//   slots, checkpoints, activation gradients, saved values, resident units,
//   the data, and the arena where every program's temporaries sit at their
//   planned offsets (PreparedProgram::runInArena). Pinned host staging slots
//   beside it.
// - Each action on its stream, in an order the events allow
//   (StreamSimulator.h; the seed picks the interleaving): PREFETCH copies a
//   unit's fp32 weights from the host store into its slot, FORWARD and
//   BACKWARD run its programs on the slots and regions, OFFLOAD copies its
//   gradients to a staging slot, UPDATE runs the host AdamW from there (a
//   resident unit's on its RESIDENT region's weights and moments).
// - Every slot and region carries the write that last filled it: a read of
//   a slot holding another unit's weights, or of a buffer not yet written
//   this micro-batch, is an error naming the action. With
//   CpuOptions::checkReads every read is also checked byte by byte against
//   a shadow of the allocation (ShadowMemory.h), which names a buffer that a
//   live neighbour overwrote.
// The arithmetic is the direct CPU path's (Trainer with streamSchedule off),
// bit for bit: the same kernels on the same values, AdamW per unit as its
// gradients land.
#include "runtime/train/Trainer.h"

namespace megac::stream {

llvm::Expected<std::unique_ptr<runtime::Trainer>> createStreamExecutor(const plan::Plan &plan,
                                                                       const runtime::CpuOptions &opts);

} // namespace megac::stream
