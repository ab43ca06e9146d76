#pragma once
// The order in which the CPU stream executor runs a schedule's actions: the
// concurrency of the GPU runtime (runtime/cuda/CudaTrainer.cpp), modelled
// deterministically.
// - The host issues the actions in the plan's order. An action on a GPU
//   stream that waits for an event an UPDATE records (a CPU event) holds the
//   host back until the latest record of it issued so far has run, as
//   CudaTrainer's waitCpuEvent does.
// - Each stream (H2D, COMPUTE, D2H, CPU) runs its issued actions in order.
//   An action may start once, for each event it waits, the latest record of
//   that event issued before it has run (CUDA's cudaStreamWaitEvent; the CPU
//   thread's cudaEventSynchronize).
// - At each turn, one of the things that can proceed (issue the next action,
//   or start the head of one stream) is picked, and an action runs to its
//   end before the next turn. The seed ranks the five at random for the
//   run and the best-ranked is mostly picked (probabilistic concurrency
//   testing), so that under some seed each stream lags as far as its waits
//   allow. Another seed is another legal interleaving: a schedule missing a
//   wait gives a wrong read under some seeds, which the executor's version
//   stamps name.
#include "runtime/plan/PlanIO.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace megac::stream {

// Runs `actions` (indices into s.actions(), in issue order) by calling
// `execute` on each, in an order the schedule's streams and events allow.
// Returns execute's first error. `trace`, when given, receives the indices
// in the order they ran.
llvm::Error simulateStreams(const plan::StreamSchedule &s, const std::vector<int> &actions, uint64_t seed,
                            const std::function<llvm::Error(int)> &execute, std::vector<int> *trace = nullptr);

} // namespace megac::stream
