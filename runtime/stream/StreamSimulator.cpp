#include "runtime/stream/StreamSimulator.h"

#include "runtime/plan/StreamLayout.h"

#include <deque>

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

struct Issued {
  int action;
  std::vector<std::pair<int, int>> tickets; // (event, record instance) that must have run
};

} // namespace

llvm::Error simulateStreams(const plan::StreamSchedule &s, const std::vector<int> &actions, uint64_t seed,
                            const std::function<llvm::Error(int)> &execute, std::vector<int> *trace) {
  const int E = s.events_size();
  std::vector<bool> cpuEvent(size_t(E), false);
  for (const plan::StreamAction &a : s.actions())
    if (a.stream() == plan::StreamAction::CPU)
      for (int32_t r : a.records())
        if (r >= 0 && r < E) cpuEvent[size_t(r)] = true;
  // Per event, its record instances in issue order: whether each has run, and by which action.
  std::vector<std::vector<bool>> ran(static_cast<size_t>(E));
  std::vector<std::vector<int>> recorder(static_cast<size_t>(E));
  std::deque<Issued> queue[4];
  size_t next = 0;           // the next action to issue
  Generator gen{seed ^ 0x6d65676163ull};
  // Probabilistic concurrency testing: each run ranks the five things that
  // can proceed (issue, the four streams) at random and mostly picks the
  // best-ranked, so that under some seed any one stream lags the others as
  // far as its waits allow: where a wait is missing, that lag gives the
  // wrong read. One pick in eight is uniform.
  int rank[5] = {0, 1, 2, 3, 4};
  for (int k = 4; k > 0; --k) std::swap(rank[k], rank[gen.next() % uint64_t(k + 1)]);

  auto describe = [&](int i) {
    const plan::StreamAction &a = s.actions(i);
    return "action " + std::to_string(i) + " (" + plan::actionKindName(a.kind()) + " of unit " + std::to_string(a.unit()) +
           " on " + plan::streamName(a.stream()) + ")";
  };
  auto ready = [&](const Issued &q) {
    for (auto [e, k] : q.tickets)
      if (!ran[size_t(e)][size_t(k)]) return false;
    return true;
  };
  // Whether the host is held back from issuing action i: it waits a CPU event whose latest record has not run.
  auto hostBlocked = [&](int i) {
    const plan::StreamAction &a = s.actions(i);
    if (a.stream() == plan::StreamAction::CPU) return false;
    for (int32_t w : a.waits())
      if (w >= 0 && w < E && cpuEvent[size_t(w)] && !ran[size_t(w)].empty() && !ran[size_t(w)].back()) return true;
    return false;
  };

  for (;;) {
    // What can proceed: 0 = issue, 1 + s = start the head of stream s.
    int options[5], n = 0;
    if (next < actions.size() && !hostBlocked(actions[next])) options[n++] = 0;
    for (int q = 0; q < 4; ++q)
      if (!queue[q].empty() && ready(queue[q].front())) options[n++] = 1 + q;
    if (n == 0) {
      bool empty = next == actions.size();
      for (auto &q : queue) empty &= q.empty();
      if (empty) return llvm::Error::success();
      std::string stuck;
      for (auto &q : queue) {
        if (q.empty()) continue;
        stuck += "\n  " + describe(q.front().action) + " waits";
        for (auto [e, k] : q.front().tickets)
          if (!ran[size_t(e)][size_t(k)])
            stuck += " " + s.events(e) + " (recorded by " + describe(recorder[size_t(e)][size_t(k)]) + ", not run)";
      }
      if (next < actions.size()) stuck += "\n  the host cannot issue " + describe(actions[next]) + ": it waits a CPU event not recorded yet";
      return err("the schedule deadlocks:" + stuck);
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
      const plan::StreamAction &a = s.actions(i);
      Issued q{i, {}};
      for (int32_t w : a.waits()) {
        if (w < 0 || w >= E) return err(describe(i) + " waits event " + llvm::Twine(w) + ", which does not exist");
        if (cpuEvent[size_t(w)] && a.stream() != plan::StreamAction::CPU) continue; // the host waited for it
        if (!ran[size_t(w)].empty()) q.tickets.push_back({w, int(ran[size_t(w)].size()) - 1});
      }
      for (int32_t r : a.records()) {
        if (r < 0 || r >= E) return err(describe(i) + " records event " + llvm::Twine(r) + ", which does not exist");
        ran[size_t(r)].push_back(false);
        recorder[size_t(r)].push_back(i);
      }
      const int st = int(a.stream());
      if (st < 0 || st > 3) return err(describe(i) + " is on no stream");
      queue[st].push_back(std::move(q));
      continue;
    }
    Issued q = std::move(queue[pick - 1].front());
    queue[pick - 1].pop_front();
    if (auto e = execute(q.action)) return e;
    if (trace) trace->push_back(q.action);
    // Its records: the earliest instance of each event this action recorded that has not run.
    for (int32_t r : s.actions(q.action).records())
      for (size_t k = 0; k < ran[size_t(r)].size(); ++k)
        if (!ran[size_t(r)][k] && recorder[size_t(r)][k] == q.action) {
          ran[size_t(r)][k] = true;
          break;
        }
  }
}

} // namespace megac::stream
