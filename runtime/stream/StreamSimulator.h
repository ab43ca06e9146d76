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
// - Overlapping steps (plan.proto's StreamSchedule.overlap_steps): a run may
//   end once every action is issued and the GPU streams are idle, as
//   CudaTrainer's step does; the CPU stream's actions left over run in the
//   next run, beside its actions, and a wait on an event not recorded yet in
//   that run is a wait on the previous run's record.
#include "runtime/plan/PlanIO.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

namespace megac::stream {

// Runs one action: its index into s.actions() and the tag of the run that issued it.
using ExecuteAction = std::function<llvm::Error(int action, int64_t tag)>;

class StreamSimulation {
public:
  explicit StreamSimulation(const plan::StreamSchedule &s);
  // Issues `actions` (indices into s.actions(), in issue order) and runs them
  // by calling `execute`, in an order the streams and events allow. With
  // `carryCpu`, it returns once every action is issued and the GPU streams
  // are idle (the CPU stream's actions left run later); else once every
  // action has run. Returns execute's first error (then the simulation is
  // reset). `trace`, when given, receives the indices in the order they ran.
  llvm::Error run(const std::vector<int> &actions, uint64_t seed, int64_t tag, bool carryCpu,
                  const ExecuteAction &execute, std::vector<int> *trace = nullptr);
  // Runs the CPU stream's actions left over.
  llvm::Error drain(const ExecuteAction &execute, std::vector<int> *trace = nullptr);
  // The tags of the runs whose CPU actions have not all run.
  std::vector<int64_t> pendingTags() const;
  bool idle() const;
  void reset();

private:
  struct Issued {
    int action;
    int64_t tag;
    std::vector<std::pair<int, int64_t>> tickets; // (event, record instance) that must have run
  };
  // One record of an event: the action that records it, and whether it has run.
  struct Record {
    int action;
    bool ran;
  };
  llvm::Error runAction(Issued q, const ExecuteAction &execute, std::vector<int> *trace);
  std::string describe(int i) const;
  // Whether record instance k of event e has run (instances count from the first run).
  bool hasRun(int e, int64_t k) const {
    return k < dropped_[size_t(e)] || records_[size_t(e)][size_t(k - dropped_[size_t(e)])].ran;
  }
  bool ready(const Issued &q) const {
    for (auto [e, k] : q.tickets)
      if (!hasRun(e, k)) return false;
    return true;
  }

  const plan::StreamSchedule &s_;
  std::vector<bool> cpuEvent_;
  // Per event, its record instances in issue order from the first that has
  // not run (the last one kept even when it has): the simulation lives over a
  // whole run of steps, so instances that have run are dropped as they go
  // (dropped_ counts them), which keeps every lookup short.
  std::vector<std::deque<Record>> records_;
  std::vector<int64_t> dropped_;
  std::deque<Issued> queue_[4];
};

// One run of `actions` with no carry, on a fresh simulation.
llvm::Error simulateStreams(const plan::StreamSchedule &s, const std::vector<int> &actions, uint64_t seed,
                            const std::function<llvm::Error(int)> &execute, std::vector<int> *trace = nullptr);

} // namespace megac::stream
