#include "runtime/stream/StreamSimulator.h"

#include "runtime/plan/StreamLayout.h"

#include <algorithm>

namespace megac::stream {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

namespace {

// splitmix64: the same sequence on every platform.
struct Generator {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

} // namespace

StreamSimulation::StreamSimulation(const plan::StreamSchedule &s) : s_(s) {
  const int E = s.events_size();
  cpuEvent_.assign(size_t(E), false);
  for (const plan::StreamAction &a : s.actions())
    if (a.stream() == plan::StreamAction::CPU)
      for (int32_t r : a.records())
        if (r >= 0 && r < E) cpuEvent_[size_t(r)] = true;
  reset();
}

void StreamSimulation::reset() {
  records_.assign(size_t(s_.events_size()), {});
  dropped_.assign(size_t(s_.events_size()), 0);
  for (auto &q : queue_) q.clear();
}

bool StreamSimulation::idle() const {
  for (const auto &q : queue_)
    if (!q.empty()) return false;
  return true;
}

std::vector<int64_t> StreamSimulation::pendingTags() const {
  std::vector<int64_t> tags;
  for (const auto &q : queue_)
    for (const Issued &i : q)
      if (std::find(tags.begin(), tags.end(), i.tag) == tags.end()) tags.push_back(i.tag);
  return tags;
}

std::string StreamSimulation::describe(int i) const {
  const plan::StreamAction &a = s_.actions(i);
  return "action " + std::to_string(i) + " (" + plan::actionKindName(a.kind()) + " of unit " + std::to_string(a.unit()) +
         " on " + plan::streamName(a.stream()) + ")";
}

llvm::Error StreamSimulation::runAction(Issued q, const ExecuteAction &execute, std::vector<int> *trace) {
  if (auto e = execute(q.action, q.tag)) {
    reset();
    return e;
  }
  if (trace) trace->push_back(q.action);
  // Its records: the earliest instance of each event this action recorded that has not run.
  for (int32_t r : s_.actions(q.action).records()) {
    std::deque<Record> &rs = records_[size_t(r)];
    for (Record &rec : rs)
      if (!rec.ran && rec.action == q.action) {
        rec.ran = true;
        break;
      }
    for (; rs.size() > 1 && rs.front().ran; ++dropped_[size_t(r)]) rs.pop_front();
  }
  return llvm::Error::success();
}

llvm::Error StreamSimulation::drain(const ExecuteAction &execute, std::vector<int> *trace) {
  while (!idle()) {
    bool moved = false;
    for (auto &queue : queue_) {
      if (queue.empty()) continue;
      if (!ready(queue.front())) continue;
      Issued q = std::move(queue.front());
      queue.pop_front();
      if (auto e = runAction(std::move(q), execute, trace)) return e;
      moved = true;
    }
    if (!moved) {
      reset();
      return err("the schedule deadlocks: the actions left over from the last step wait for events that never run");
    }
  }
  return llvm::Error::success();
}

llvm::Error StreamSimulation::run(const std::vector<int> &actions, uint64_t seed, int64_t tag, bool carryCpu,
                                  const ExecuteAction &execute, std::vector<int> *trace) {
  const int E = s_.events_size();
  size_t next = 0; // the next action to issue
  Generator gen{seed ^ 0x6d65676163ull};
  // Probabilistic concurrency testing: each run ranks the five things that
  // can proceed (issue, the four streams) at random and mostly picks the
  // best-ranked, so that under some seed any one stream lags the others as
  // far as its waits allow: where a wait is missing, that lag gives the
  // wrong read. One pick in eight is uniform.
  int rank[5] = {0, 1, 2, 3, 4};
  for (int k = 4; k > 0; --k) std::swap(rank[k], rank[gen.next() % uint64_t(k + 1)]);

  // Whether the host is held back from issuing action i: it waits a CPU event whose latest record has not run.
  auto hostBlocked = [&](int i) {
    const plan::StreamAction &a = s_.actions(i);
    if (a.stream() == plan::StreamAction::CPU) return false;
    for (int32_t w : a.waits())
      if (w >= 0 && w < E && cpuEvent_[size_t(w)] && !records_[size_t(w)].empty() && !records_[size_t(w)].back().ran)
        return true;
    return false;
  };
  auto fail = [&](llvm::Error e) {
    reset();
    return e;
  };

  for (;;) {
    const bool issued = next == actions.size();
    bool gpuIdle = true;
    for (int q = 0; q < 4; ++q) gpuIdle &= q == plan::StreamAction::CPU || queue_[q].empty();
    if (carryCpu && issued && gpuIdle) return llvm::Error::success(); // the step ends; the host's AdamW runs on
    // What can proceed: 0 = issue, 1 + s = start the head of stream s.
    int options[5], n = 0;
    if (!issued && !hostBlocked(actions[next])) options[n++] = 0;
    for (int q = 0; q < 4; ++q)
      if (!queue_[q].empty() && ready(queue_[q].front())) options[n++] = 1 + q;
    if (n == 0) {
      if (issued && idle()) return llvm::Error::success();
      std::string stuck;
      for (auto &q : queue_) {
        if (q.empty()) continue;
        stuck += "\n  " + describe(q.front().action) + " waits";
        for (auto [e, k] : q.front().tickets)
          if (!hasRun(e, k))
            stuck += " " + s_.events(e) + " (recorded by " +
                     describe(records_[size_t(e)][size_t(k - dropped_[size_t(e)])].action) + ", not run)";
      }
      if (!issued) stuck += "\n  the host cannot issue " + describe(actions[next]) + ": it waits a CPU event not recorded yet";
      return fail(err("the schedule deadlocks:" + stuck));
    }
    int pick = options[0];
    if (gen.next() % 8 == 0) {
      pick = options[gen.next() % uint64_t(n)];
    } else {
      for (int k = 1; k < n; ++k)
        if (rank[options[k]] < rank[pick]) pick = options[k];
    }
    if (pick == 0) {
      const int i = actions[next++];
      const plan::StreamAction &a = s_.actions(i);
      Issued q{i, tag, {}};
      for (int32_t w : a.waits()) {
        if (w < 0 || w >= E) return fail(err(describe(i) + " waits event " + llvm::Twine(w) + ", which does not exist"));
        if (cpuEvent_[size_t(w)] && a.stream() != plan::StreamAction::CPU) continue; // the host waited for it
        if (!records_[size_t(w)].empty())
          q.tickets.push_back({w, dropped_[size_t(w)] + int64_t(records_[size_t(w)].size()) - 1});
      }
      for (int32_t r : a.records()) {
        if (r < 0 || r >= E) return fail(err(describe(i) + " records event " + llvm::Twine(r) + ", which does not exist"));
        records_[size_t(r)].push_back({i, false});
      }
      const int st = int(a.stream());
      if (st < 0 || st > 3) return fail(err(describe(i) + " is on no stream"));
      queue_[st].push_back(std::move(q));
      continue;
    }
    Issued q = std::move(queue_[pick - 1].front());
    queue_[pick - 1].pop_front();
    if (auto e = runAction(std::move(q), execute, trace)) return e;
  }
}

llvm::Error simulateStreams(const plan::StreamSchedule &s, const std::vector<int> &actions, uint64_t seed,
                            const std::function<llvm::Error(int)> &execute, std::vector<int> *trace) {
  StreamSimulation sim(s);
  return sim.run(actions, seed, 0, /*carryCpu=*/false, [&](int i, int64_t) { return execute(i); }, trace);
}

} // namespace megac::stream
