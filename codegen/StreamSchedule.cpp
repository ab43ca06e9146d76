#include "codegen/StreamSchedule.h"

#include "codegen/MemoryPlan.h"
#include "runtime/plan/Bf16Weights.h"
#include "runtime/plan/PackCache.h"
#include "runtime/plan/StreamLayout.h"
#include "runtime/plan/TokenRows.h"
#include "runtime/plan/UnitPrograms.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <algorithm>
#include <climits>
#include <set>

namespace megac::codegen {

using plan::DeviceRegion;
using plan::StreamAction;

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

namespace {

// Issues the actions in host order and keeps track of what each slot holds
// and whether its `free` event has been recorded yet this step (a first use
// waits for nothing: the previous step ended with every action finished;
// with overlapping steps, every GPU action, while the host's AdamW may still
// run: then the first OFFLOAD into a staging slot and the first PREFETCH of
// a unit wait for the previous step's UPDATEs, plan.proto's overlap_steps).
class ActionBuilder {
public:
  ActionBuilder(plan::StreamSchedule &s, const plan::Plan &p, int weightSlots, int gradSlots, bool overlap,
                bool unreadRowsEarly)
      : s_(s), p_(p), K_(weightSlots), G_(gradSlots), overlap_(overlap), inSlot_(size_t(weightSlots), -1),
        wFreeRecorded_(size_t(weightSlots), false), gFreeRecorded_(size_t(gradSlots), false),
        sFreeRecorded_(size_t(gradSlots), false), mFreeRecorded_(size_t(weightSlots), false),
        slotOf_(size_t(p.units_size()), -1), updated_(size_t(p.units_size()), -1),
        fetched_(size_t(p.units_size()), -1), prefetched_(size_t(p.units_size()), false) {
    std::vector<char> kinds{'w', 'g', 's'};
    if (plan::anyAdamwOnGpu(p)) kinds.push_back('m'); // moment slots, one beside each weight slot
    for (char kind : kinds) {
      int n = kind == 'w' || kind == 'm' ? K_ : G_;
      for (int k = 0; k < n; ++k)
        for (bool ready : {true, false}) s_.add_events(plan::slotEventName(kind, k, ready));
    }
    int streamed = 0;
    for (int u = 0; u < p.units_size(); ++u)
      if (!p.units(u).resident()) slotOf_[size_t(u)] = streamed++ % K_;
    for (int u = 0; overlap_ && u < p.units_size(); ++u)
      if (plan::steppedOnHost(p.units(u))) {
        updated_[size_t(u)] = s_.events_size();
        s_.add_events(plan::unitUpdatedEventName(u));
      }
    for (int u = 0; unreadRowsEarly && u < p.units_size(); ++u)
      if (!plan::unreadRowsParameters(p, u).empty()) {
        fetched_[size_t(u)] = s_.events_size();
        s_.add_events(plan::unitFetchedEventName(u));
      }
  }

  // The i-th streamed unit's weight slot is i % K; a resident unit has none.
  int weightSlotOf(int unit) const { return slotOf_[size_t(unit)]; }

  // Event ids: per slot kind, [k.ready, k.free] pairs; weight slots first,
  // then grad slots, staging slots, and moment slots (where they exist).
  int event(char kind, int slot, bool ready) const {
    int base = kind == 'w' ? 0 : kind == 'g' ? 2 * K_ : kind == 's' ? 2 * K_ + 2 * G_ : 2 * K_ + 4 * G_;
    return base + 2 * slot + (ready ? 0 : 1);
  }

  // Set while the backward's actions are issued.
  bool inBackward = false;

  // H2D of a streamed unit's weights into its slot, unless they are still
  // there: after the forward, the last K streamed units' weights are still
  // resident in their slots (the head's always, as it is both the last
  // forward and the first backward unit), so their backward PREFETCH is
  // skipped and BACKWARD reads the copy the forward used (the host master is
  // not updated before).
  // In the backward, an adamw_on_gpu unit's moments follow (FETCH_MOMENTS),
  // whether or not its weights had to come.
  // With overlapping steps, a unit's first PREFETCH waits for the previous
  // step's host AdamW of its parameters (of every unit that shares one).
  void prefetch(int unit) {
    int k = weightSlotOf(unit);
    if (inSlot_[size_t(k)] != unit) {
      StreamAction *a = add(StreamAction::PREFETCH, StreamAction::H2D, unit);
      a->set_weight_slot(k);
      if (!prefetched_[size_t(unit)])
        for (int v : plan::unitsSharingParameters(p_, unit))
          if (updated_[size_t(v)] >= 0) a->add_waits(updated_[size_t(v)]);
      prefetched_[size_t(unit)] = true;
      if (wFreeRecorded_[size_t(k)]) a->add_waits(event('w', k, false));
      a->add_records(event('w', k, true));
      inSlot_[size_t(k)] = unit;
      // Once this copy has read the masters, the host steps the rows of the
      // unit's token-indexed tables that no token reads (runtime/plan/TokenRows.h).
      if (!inBackward && fetched_[size_t(unit)] >= 0) {
        a->add_records(fetched_[size_t(unit)]);
        add(StreamAction::UPDATE_UNREAD_ROWS, StreamAction::CPU, unit)->add_waits(fetched_[size_t(unit)]);
      }
    }
    if (!inBackward || !p_.units(unit).adamw_on_gpu()) return;
    StreamAction *m = add(StreamAction::FETCH_MOMENTS, StreamAction::H2D, unit);
    m->set_weight_slot(k);
    if (mFreeRecorded_[size_t(k)]) m->add_waits(event('m', k, false));
    m->add_records(event('m', k, true));
  }

  // The FORWARD of micro-batch m; the pass's last one frees the weight slot.
  int forward(int unit, int m, bool lastMicroBatch) {
    int k = weightSlotOf(unit);
    StreamAction *a = add(StreamAction::FORWARD, StreamAction::COMPUTE, unit);
    a->set_micro_batch(m);
    if (k >= 0) {
      a->set_weight_slot(k);
      a->add_waits(event('w', k, true));
      if (lastMicroBatch) {
        a->add_records(event('w', k, false));
        wFreeRecorded_[size_t(k)] = true;
      }
    }
    return s_.actions_size() - 1;
  }

  // BACKWARD into grad slot g, then OFFLOAD of slot g into staging slot g,
  // then UPDATE from staging slot g; a resident unit's UPDATE reads grad slot
  // g on the compute stream. Returns the BACKWARD's index.
  // An adamw_on_gpu unit: BACKWARD, its UPDATE on the compute stream into
  // the weight and moment slots, then WRITEBACK, which frees both slots.
  // Micro-batch m of the pass: the first waits for the grad slot, the later
  // ones add to it; only the last is followed by the rest.
  int backward(int unit, int g, int m, bool lastMicroBatch) {
    int k = weightSlotOf(unit);
    const bool onGpu = k >= 0 && p_.units(unit).adamw_on_gpu();
    StreamAction *b = add(StreamAction::BACKWARD, StreamAction::COMPUTE, unit);
    b->set_grad_slot(g);
    b->set_micro_batch(m);
    if (k >= 0) {
      b->set_weight_slot(k);
      b->add_waits(event('w', k, true));
    }
    if (m == 0 && gFreeRecorded_[size_t(g)]) b->add_waits(event('g', g, false));
    int index = s_.actions_size() - 1;
    if (!lastMicroBatch) return index;
    if (k >= 0 && !onGpu) b->add_records(event('w', k, false));
    b->add_records(event('g', g, true));
    gFreeRecorded_[size_t(g)] = true;

    if (k < 0 || onGpu) { // AdamW on the GPU, on the compute stream, from grad slot g
      StreamAction *u = add(StreamAction::UPDATE, StreamAction::COMPUTE, unit);
      u->set_grad_slot(g);
      u->add_waits(event('g', g, true));
      if (onGpu) u->add_waits(event('m', k, true));
      u->add_records(event('g', g, false));
      if (!onGpu) return index;
      u->set_weight_slot(k); // into the weight slot and its moment slot, then both go back
      u->add_records(event('m', k, true));
      StreamAction *w = add(StreamAction::WRITEBACK, StreamAction::D2H, unit);
      w->set_weight_slot(k);
      w->add_waits(event('m', k, true));
      w->add_records(event('w', k, false));
      w->add_records(event('m', k, false));
      mFreeRecorded_[size_t(k)] = true;
      return index;
    }
    // The host blocks on s<g>.free (a CPU event) before issuing this copy.
    StreamAction *o = add(StreamAction::OFFLOAD, StreamAction::D2H, unit);
    o->set_grad_slot(g);
    o->add_waits(event('g', g, true));
    if (sFreeRecorded_[size_t(g)] || overlap_) o->add_waits(event('s', g, false));
    o->add_records(event('g', g, false));
    o->add_records(event('s', g, true));
    return index;
  }

  // The host's AdamW of a unit whose gradients the OFFLOAD above put in
  // staging slot g (issued then, or later where the order defers it).
  void hostUpdate(int unit, int g) {
    StreamAction *u = add(StreamAction::UPDATE, StreamAction::CPU, unit);
    u->set_grad_slot(g);
    u->add_waits(event('s', g, true));
    u->add_records(event('s', g, false));
    if (updated_[size_t(unit)] >= 0) u->add_records(updated_[size_t(unit)]);
    sFreeRecorded_[size_t(g)] = true;
  }

private:
  StreamAction *add(StreamAction::Kind kind, StreamAction::Stream stream, int unit) {
    StreamAction *a = s_.add_actions();
    a->set_kind(kind);
    a->set_stream(stream);
    a->set_unit(unit);
    a->set_weight_slot(-1);
    a->set_grad_slot(-1);
    return a;
  }

  plan::StreamSchedule &s_;
  const plan::Plan &p_;
  int K_, G_;
  bool overlap_;
  std::vector<int> inSlot_; // per weight slot: the unit whose weights it holds, -1 none yet
  std::vector<bool> wFreeRecorded_, gFreeRecorded_, sFreeRecorded_, mFreeRecorded_;
  std::vector<int> slotOf_;
  std::vector<int> updated_;       // per unit: its "u<unit>.updated" event, -1 none
  std::vector<int> fetched_;       // per unit: its "u<unit>.fetched" event (UPDATE_UNREAD_ROWS), -1 none
  std::vector<bool> prefetched_;   // per unit: a PREFETCH of it was issued this step
};

void addRegion(plan::StreamSchedule &s, DeviceRegion::Kind kind, int index, int64_t bytes, int first, int last,
               int microBatch = 0) {
  DeviceRegion *r = s.add_regions();
  r->set_kind(kind);
  r->set_index(index);
  r->set_micro_batch(microBatch);
  r->set_bytes(plan::alignUp(bytes));
  r->set_first_action(first);
  r->set_last_action(last);
}

// An offloaded checkpoint: activation `activation` of micro-batch `mb`,
// written by unit `producer`. Positions count the pass's FORWARDs and
// BACKWARDs in issue order (forward: unit-major, then micro-batch).
struct OffloadedCheckpoint {
  int activation = -1, mb = 0, producer = -1;
  int freePos = -1; // the FORWARD after its last FORWARD reader: waits for the copy out
  int loadPos = -1; // the BACKWARD before its first BACKWARD reader: the copy back is issued before it
  int64_t hostOffset = 0;
  int event = -1; // its first event; c<j>.written, .saved, .clear, .loaded follow in order
  int saveAt = -1, freedAt = -1, loadAt = -1; // action indices
};

bool readsActivation(const plan::Unit &u, int activation) {
  return std::find(u.activation_inputs().begin(), u.activation_inputs().end(), activation) != u.activation_inputs().end();
}

// The boundary checkpoints of the first `units` units, each micro-batch's
// where the copy out has finished before the copy back starts (its last
// FORWARD reader is followed by a FORWARD, and its first BACKWARD reader
// follows another BACKWARD, which comes after that FORWARD); in (unit,
// micro-batch, output) order.
std::vector<OffloadedCheckpoint> chooseOffloads(const plan::Plan &p, const std::vector<int> &producer,
                                                const std::vector<std::vector<std::pair<int, int>>> &consumers, int M,
                                                int units) {
  std::vector<OffloadedCheckpoint> out;
  const int N = p.units_size();
  auto fwdPos = [&](int u, int m) { return u * M + m; };
  auto bwdPos = [&](int u, int m) { return N * M + (N - 1 - u) * M + m; };
  for (int u = 0; u < std::min(units, N); ++u)
    for (int m = 0; m < M; ++m)
      for (int32_t a : p.units(u).activation_outputs()) {
        if (p.activations(a).kind() != plan::Activation::INTERMEDIATE || consumers[size_t(a)].empty() || producer[size_t(a)] != u)
          continue;
        int lastFwd = -1, firstBwd = INT32_MAX;
        for (auto [c, k] : consumers[size_t(a)]) {
          lastFwd = std::max(lastFwd, fwdPos(c, m));
          firstBwd = std::min(firstBwd, bwdPos(c, m));
        }
        OffloadedCheckpoint c;
        c.activation = a;
        c.mb = m;
        c.producer = u;
        c.freePos = lastFwd + 1;
        c.loadPos = firstBwd - 1;
        // The copy out waited for by a FORWARD, the copy back issued before a BACKWARD, the first before the second.
        if (c.freePos < N * M && c.loadPos >= N * M && c.freePos < c.loadPos) out.push_back(c);
      }
  return out;
}

// An order of the host's UPDATEs names each host-stepped unit once and puts
// a unit after the later units (in forward order) sharing a parameter with
// it: the lowest unit's UPDATE steps the shared parameter, from the sum of
// every contribution.
llvm::Error checkHostUpdateOrder(const plan::Plan &p, const std::vector<int> &order) {
  if (order.empty()) return llvm::Error::success();
  const int N = p.units_size();
  std::vector<int> rank(size_t(N), -1);
  for (size_t i = 0; i < order.size(); ++i) {
    const int u = order[i];
    if (u < 0 || u >= N || !plan::steppedOnHost(p.units(u)) || rank[size_t(u)] >= 0)
      return err("the host update order names unit " + llvm::Twine(u) +
                 ", which does not exist, is not stepped on the host or was named before");
    rank[size_t(u)] = int(i);
  }
  for (int u = 0; u < N; ++u) {
    if (!plan::steppedOnHost(p.units(u))) continue;
    if (rank[size_t(u)] < 0) return err("the host update order leaves out unit '" + p.units(u).name() + "'");
    for (int v : plan::unitsSharingParameters(p, u))
      if (v > u && plan::steppedOnHost(p.units(v)) && rank[size_t(v)] > rank[size_t(u)])
        return err("the host update order puts unit '" + p.units(u).name() + "' before '" + p.units(v).name() +
                   "', whose gradient of a parameter they share it must add first");
  }
  return llvm::Error::success();
}

// Which grad slot (and staging slot: the same index) each unit's BACKWARD
// writes, and when the host's UPDATEs are issued. In arrival order (no
// order given) each UPDATE follows its OFFLOAD and the slots take turns. In
// a given order (ScheduleOptions.hostUpdateOrder) an offloaded unit's
// UPDATE waits, its gradients held in their staging slot, until the units
// before it in the order have theirs; a BACKWARD takes the free slot whose
// last UPDATE was issued first, and where every slot holds gradients
// waiting, the first of them in the order is updated out of turn.
class HostUpdates {
public:
  using Emit = llvm::function_ref<void(int unit, int slot)>;
  HostUpdates(const plan::Plan &p, const std::vector<int> &order, std::vector<int64_t> slotBytes)
      : p_(p), order_(order), slotBytes_(std::move(slotBytes)), held_(slotBytes_.size(), false),
        freedAt_(slotBytes_.size()), rank_(size_t(p.units_size()), INT32_MAX) {
    const int slots = int(slotBytes_.size());
    for (int k = 0; k < slots; ++k) freedAt_[size_t(k)] = k - slots; // unused slots in index order
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i] >= 0 && order[i] < p.units_size()) rank_[size_t(order[i])] = int(i);
  }

  // The slot the next unit's BACKWARD writes (`bytes`: its gradients): a
  // free one that holds them, of the smallest size that does, the one whose
  // UPDATE was issued first. Where none is free, the waiting UPDATE first in
  // the order among those holding a slot that would do is issued out of turn.
  int nextSlot(int64_t bytes, Emit emit) {
    for (;;) {
      int best = -1;
      for (int k = 0; k < int(held_.size()); ++k) {
        if (held_[size_t(k)] || slotBytes_[size_t(k)] < bytes) continue;
        if (best < 0 || slotBytes_[size_t(k)] < slotBytes_[size_t(best)] ||
            (slotBytes_[size_t(k)] == slotBytes_[size_t(best)] && freedAt_[size_t(k)] < freedAt_[size_t(best)]))
          best = k;
      }
      if (best >= 0) return best;
      issue(firstInOrder(bytes), emit);
    }
  }

  // After unit u's last BACKWARD (and its OFFLOAD, where the host steps it).
  void offloaded(int u, int slot, Emit emit) {
    if (!plan::steppedOnHost(p_.units(u))) { // its UPDATE ran on the GPU, which freed the slot
      freedAt_[size_t(slot)] = issued_++;
      return;
    }
    waiting_.push_back({u, slot});
    held_[size_t(slot)] = true;
    drain(emit, false);
  }

  // At the end of the backward: every UPDATE still waiting, in the order.
  void finish(Emit emit) { drain(emit, true); }

private:
  struct Waiting {
    int unit, slot;
  };
  void issue(size_t i, Emit emit) {
    const Waiting w = waiting_[i];
    waiting_.erase(waiting_.begin() + long(i));
    emit(w.unit, w.slot);
    held_[size_t(w.slot)] = false;
    freedAt_[size_t(w.slot)] = issued_++;
    done_.insert(w.unit);
  }
  // The waiting unit first in the order (arrival breaks ties: units the
  // order does not name) among those whose slot holds `bytes`. The slots too
  // small for them are never all a unit's: the largest unit's fit every slot
  // of the largest size.
  size_t firstInOrder(int64_t bytes = 0) const {
    size_t best = waiting_.size();
    for (size_t i = 0; i < waiting_.size(); ++i)
      if (slotBytes_[size_t(waiting_[i].slot)] >= bytes &&
          (best == waiting_.size() || rank_[size_t(waiting_[i].unit)] < rank_[size_t(waiting_[best].unit)]))
        best = i;
    return best == waiting_.size() ? 0 : best;
  }
  // Issues the waiting UPDATEs whose turn it is: in arrival order, all; in a
  // given order, while the next unit of the order is waiting (all, `force`).
  void drain(Emit emit, bool force) {
    while (!waiting_.empty()) {
      if (order_.empty() || force) {
        issue(order_.empty() ? 0 : firstInOrder(), emit);
        continue;
      }
      while (next_ < order_.size() && done_.count(order_[next_])) ++next_;
      if (next_ >= order_.size()) {
        issue(0, emit);
        continue;
      }
      size_t i = 0;
      while (i < waiting_.size() && waiting_[i].unit != order_[next_]) ++i;
      if (i == waiting_.size()) return; // its gradients have not come yet
      issue(i, emit);
    }
  }

  const plan::Plan &p_;
  const std::vector<int> &order_;
  std::vector<int64_t> slotBytes_; // per slot: the gradients' bytes it holds
  std::vector<bool> held_;      // per slot: gradients waiting for their UPDATE
  std::vector<int64_t> freedAt_; // per slot: when its last UPDATE was issued (a counter)
  std::vector<int> rank_;       // per unit: its place in the order
  std::vector<Waiting> waiting_;
  std::set<int> done_;
  size_t next_ = 0;
  int64_t issued_ = 0;
};

// Grad slots of the largest unit's size where the others are smaller.
constexpr int kLargeGradSlots = 2;

// The size of the grad slots after the first kLargeGradSlots, or 0 where
// all are the largest unit's: `asked` > 0, that size; auto (< 0), by
// autoSmallGradSlotBytes.
int64_t smallGradSlotBytes(const plan::Plan &p, int G, int64_t asked) {
  if (G <= kLargeGradSlots || asked == 0) return 0;
  std::vector<int64_t> bytes;
  for (int u = 0; u < p.units_size(); ++u) bytes.push_back(plan::unitWeightLayout(p, u).bytes);
  if (asked > 0) return asked < *std::max_element(bytes.begin(), bytes.end()) ? plan::alignUp(asked) : 0;
  return autoSmallGradSlotBytes(bytes);
}

} // namespace

int64_t autoSmallGradSlotBytes(std::vector<int64_t> unitBytes) {
  if (unitBytes.size() < 3) return 0;
  std::sort(unitBytes.rbegin(), unitBytes.rend());
  const int64_t small = unitBytes[2];
  const int64_t larger = std::count_if(unitBytes.begin(), unitBytes.end(), [&](int64_t b) { return b > small; });
  return larger * 4 <= int64_t(unitBytes.size()) && small * 4 <= unitBytes.front() * 3 ? small : 0;
}

llvm::Error buildStreamSchedule(plan::Plan &p, const ScheduleOptions &o) {
  const int K = o.weightSlots, G = o.gradSlots, N = p.units_size();
  if (K < 2) return err("--weight-slots must be at least 2 (got " + llvm::Twine(K) + "): one slot computes while the next fills");
  if (G < 1) return err("the schedule needs at least one grad slot (got " + llvm::Twine(G) + ")");
  if (N == 0) return err("the plan has no units to schedule");
  const int64_t accum = std::max<int64_t>(p.optimizer().grad_accum(), 1);
  const int M = o.microBatches;
  if (M < 1 || accum % M != 0)
    return err("--micro-batches-per-pass " + llvm::Twine(M) + " does not divide --grad-accum " + llvm::Twine(accum) +
               ": each pass carries the same number of micro-batches");
  for (int u = 0; u < N; ++u)
    if (p.units(u).adamw_on_gpu() && (p.units(u).resident() || !plan::canBeResident(p, u)))
      return err("unit '" + p.units(u).name() + "' cannot run its AdamW on the GPU while it streams: it is resident, "
                 "shares a parameter with another unit or has none");
  if (auto e = checkHostUpdateOrder(p, o.hostUpdateOrder)) return e;
  plan::StreamSchedule &s = *p.mutable_schedule();
  s.Clear();
  s.set_weight_slots(K);
  s.set_grad_slots(G);
  s.set_grad_slot_bytes(plan::largestUnitWeightBytes(p));
  const int64_t small = smallGradSlotBytes(p, G, o.smallGradSlotBytes);
  if (small > 0) {
    s.set_small_grad_slots(G - kLargeGradSlots);
    s.set_small_grad_slot_bytes(small);
  }
  s.set_gpu_budget_bytes(o.gpuBudgetBytes);
  s.set_micro_batches(M);
  // A step that keeps its gradients (--clip, or more than one pass) runs the
  // host's AdamW after its last micro-batch: nothing to overlap.
  const bool overlap = o.overlapSteps && !plan::stepKeepsGradients(p);
  s.set_overlap_steps(overlap);

  // Actions. PREFETCH of streamed unit i+K-1 is issued before the FORWARDs
  // of streamed unit i, so the H2D stream runs K-1 units ahead of compute;
  // the backward (units in reverse) the same. Resident units need no
  // PREFETCH. Each unit runs the pass's M micro-batches in turn.
  ActionBuilder ab(s, p, K, G, overlap, o.unreadRowsEarly);
  // [unit * M + micro-batch] -> action index
  std::vector<int> fwdAt(size_t(N) * size_t(M)), bwdAt(size_t(N) * size_t(M));
  auto at = [M](int u, int m) { return size_t(u) * size_t(M) + size_t(m); };
  auto issue = [&](const std::vector<int> &order, auto &&compute) {
    std::vector<int> streamed;
    for (int u : order)
      if (!p.units(u).resident()) streamed.push_back(u);
    size_t prefetched = 0, seen = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      seen += !p.units(order[i]).resident();
      for (; prefetched < streamed.size() && prefetched + 1 < seen + size_t(K); ++prefetched) ab.prefetch(streamed[prefetched]);
      compute(i, order[i]);
    }
  };
  const int A = p.activations_size();
  std::vector<int> producer(size_t(A), -1);
  std::vector<std::vector<std::pair<int, int>>> consumers(static_cast<size_t>(A)); // (unit, input position)
  for (int u = 0; u < N; ++u) {
    const plan::Unit &unit = p.units(u);
    for (int32_t a : unit.activation_outputs()) {
      if (a < 0 || a >= A) return err("unit '" + unit.name() + "' writes activation " + llvm::Twine(a) + ", which does not exist");
      producer[size_t(a)] = u;
    }
    for (int k = 0; k < unit.activation_inputs_size(); ++k) {
      int32_t a = unit.activation_inputs(k);
      if (a < 0 || a >= A) return err("unit '" + unit.name() + "' reads activation " + llvm::Twine(a) + ", which does not exist");
      consumers[size_t(a)].push_back({u, k});
    }
  }
  std::vector<OffloadedCheckpoint> offloaded = chooseOffloads(p, producer, consumers, M, o.offloadCheckpoints);
  int64_t pinnedCheckpoints = 0;
  for (size_t j = 0; j < offloaded.size(); ++j) {
    OffloadedCheckpoint &c = offloaded[j];
    c.hostOffset = pinnedCheckpoints;
    pinnedCheckpoints += plan::alignUp(plan::typeBytes(p.activations(c.activation).type()));
    c.event = s.events_size();
    for (const char *what : {"written", "saved", "clear", "loaded"}) s.add_events(plan::checkpointEventName(int(j), what));
  }
  s.set_pinned_checkpoint_bytes(pinnedCheckpoints);
  auto copy = [&](StreamAction::Kind kind, const OffloadedCheckpoint &c) {
    StreamAction *a = s.add_actions();
    a->set_kind(kind);
    a->set_stream(kind == StreamAction::SAVE_CHECKPOINT ? StreamAction::D2H : StreamAction::H2D);
    a->set_unit(c.producer);
    a->set_weight_slot(-1);
    a->set_grad_slot(-1);
    a->set_micro_batch(c.mb);
    a->set_activation(c.activation);
    a->set_host_offset(c.hostOffset);
    return a;
  };
  int computePos = 0; // FORWARDs and BACKWARDs issued so far
  auto lastComputeAction = [&] {
    for (int i = s.actions_size() - 1; i >= 0; --i)
      if (s.actions(i).stream() == StreamAction::COMPUTE) return i;
    return -1;
  };

  std::vector<int> forwardOrder(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) forwardOrder[size_t(i)] = i;
  issue(forwardOrder, [&](size_t, int u) {
    for (int m = 0; m < M; ++m) {
      const int f = fwdAt[at(u, m)] = ab.forward(u, m, m == M - 1);
      // The FORWARD after a checkpoint's last forward reader waits for its copy out.
      for (OffloadedCheckpoint &c : offloaded)
        if (c.freePos == computePos) {
          s.mutable_actions(f)->add_waits(c.event + 1);
          c.freedAt = f;
        }
      ++computePos;
      for (OffloadedCheckpoint &c : offloaded) {
        if (c.producer != u || c.mb != m) continue;
        s.mutable_actions(f)->add_records(c.event);
        StreamAction *save = copy(StreamAction::SAVE_CHECKPOINT, c);
        save->add_waits(c.event);
        save->add_records(c.event + 1);
        c.saveAt = s.actions_size() - 1;
      }
    }
  });
  std::vector<int> backwardOrder(forwardOrder.rbegin(), forwardOrder.rend());
  ab.inBackward = true;
  std::vector<int64_t> gradSlotSizes;
  for (int g = 0; g < G; ++g) gradSlotSizes.push_back(plan::gradSlotBytes(s, g));
  HostUpdates updates(p, o.hostUpdateOrder, gradSlotSizes);
  auto hostUpdate = [&](int unit, int slot) { ab.hostUpdate(unit, slot); };
  issue(backwardOrder, [&](size_t, int u) {
    const int g = updates.nextSlot(plan::unitWeightLayout(p, u).bytes, hostUpdate);
    for (int m = 0; m < M; ++m) {
      // A checkpoint comes back while the BACKWARD before its first reader
      // runs, once the compute stream's work before it is done.
      for (OffloadedCheckpoint &c : offloaded) {
        if (c.loadPos != computePos) continue;
        const int prev = lastComputeAction();
        s.mutable_actions(prev)->add_records(c.event + 2);
        StreamAction *load = copy(StreamAction::LOAD_CHECKPOINT, c);
        load->add_waits(c.event + 2);
        load->add_records(c.event + 3);
        c.loadAt = s.actions_size() - 1;
      }
      const int bw = bwdAt[at(u, m)] = ab.backward(u, g, m, m == M - 1);
      for (const OffloadedCheckpoint &c : offloaded)
        if (c.mb == m && readsActivation(p.units(u), c.activation)) s.mutable_actions(bw)->add_waits(c.event + 3);
      ++computePos;
    }
    updates.offloaded(u, g, hostUpdate);
  });
  updates.finish(hostUpdate);
  const int last = s.actions_size() - 1;

  // Regions with their lifetimes (action indices, inclusive).
  const int64_t slotBytes = plan::largestUnitWeightBytes(p, /*streamedOnly=*/true);
  s.set_weight_slot_bytes(slotBytes);
  s.set_pinned_staging_bytes(plan::stagingOffset(s, G));
  for (int k = 0; k < K; ++k) addRegion(s, DeviceRegion::WEIGHT_SLOT, k, slotBytes, 0, last);
  if ((o.bf16WeightCopies || o.bf16WeightStream) && p.compute() == "bf16" && slotBytes > 0) {
    s.set_weight_copy_bytes(plan::weightCopyBytes(slotBytes));
    for (int k = 0; k < K; ++k) addRegion(s, DeviceRegion::WEIGHT_COPY, k, s.weight_copy_bytes(), 0, last);
  }
  // Weights streamed as bf16: every parameter that may (runtime/plan/Bf16Weights.h).
  for (int i = 0; i < p.parameters_size(); ++i)
    p.mutable_parameters(i)->set_streams_bf16(o.bf16WeightStream && plan::whyNotBf16Stream(p, i).empty());
  for (int g = 0; g < G; ++g) addRegion(s, DeviceRegion::GRAD_SLOT, g, plan::gradSlotBytes(s, g), 0, last);
  if (plan::anyAdamwOnGpu(p))
    for (int k = 0; k < K; ++k) addRegion(s, DeviceRegion::MOMENT_SLOT, k, plan::momentSlotBytes(p), 0, last);
  for (int u = 0; u < N; ++u)
    if (p.units(u).resident()) addRegion(s, DeviceRegion::RESIDENT, u, plan::residentLayout(p, u).bytes, 0, last);

  std::vector<const OffloadedCheckpoint *> offloadOf(size_t(A) * size_t(M), nullptr);
  for (const OffloadedCheckpoint &c : offloaded) offloadOf[at(c.activation, c.mb)] = &c;
  for (int a = 0; a < A; ++a) {
    const plan::Activation &act = p.activations(a);
    int64_t bytes = plan::typeBytes(act.type());
    if (bytes < 0) return err("activation '" + act.name() + "' has no size");
    int pu = producer[size_t(a)];
    for (int m = 0; m < M; ++m) {
      if (pu < 0) { // tokens and targets: copied in before the step
        addRegion(s, DeviceRegion::DATA, a, bytes, 0, last, m);
        continue;
      }
      // Written by the producer's FORWARD, read until the last consumer's
      // BACKWARD (the loss: until the host reads it after the step).
      int readEnd = fwdAt[at(pu, m)];
      if (const OffloadedCheckpoint *c = offloadOf[at(a, m)]) {
        // Through the forward only: its FORWARD readers, its copy out and
        // the FORWARD that waits for that; back in for the BACKWARD readers.
        int backEnd = c->loadAt;
        for (auto [u, k] : consumers[size_t(a)]) {
          readEnd = std::max(readEnd, fwdAt[at(u, m)]);
          backEnd = std::max(backEnd, bwdAt[at(u, m)]);
        }
        addRegion(s, DeviceRegion::CHECKPOINT, a, bytes, fwdAt[at(pu, m)], std::max({readEnd, c->saveAt, c->freedAt}), m);
        addRegion(s, DeviceRegion::LOADED_CHECKPOINT, a, bytes, c->loadAt, backEnd, m);
      } else {
        for (auto [c, k] : consumers[size_t(a)]) readEnd = std::max(readEnd, bwdAt[at(c, m)]);
        if (act.kind() == plan::Activation::LOSS) readEnd = last;
        addRegion(s, DeviceRegion::CHECKPOINT, a, bytes, fwdAt[at(pu, m)], readEnd, m);
      }
      // Its gradient: summed by the consumers' BACKWARDs (the first one in
      // issue order writes it), read by the producer's BACKWARD. Where no
      // consumer gives a gradient (the loss: the seed), the runtime fills it
      // just before the producer's BACKWARD.
      int gradFirst = bwdAt[at(pu, m)];
      for (auto [c, k] : consumers[size_t(a)]) {
        const plan::Template &t = p.templates(p.units(c).template_id());
        if (k < t.input_has_gradient_size() && t.input_has_gradient(k)) gradFirst = std::min(gradFirst, bwdAt[at(c, m)]);
      }
      addRegion(s, DeviceRegion::ACTIVATION_GRAD, a, bytes, gradFirst, bwdAt[at(pu, m)], m);
    }
  }
  // A unit that keeps its activations holds its saved values from its
  // FORWARD to its BACKWARD.
  for (int u = 0; u < N; ++u)
    if (plan::keepsActivations(p, u))
      for (int m = 0; m < M; ++m)
        addRegion(s, DeviceRegion::SAVED, u, plan::savedLayout(p.templates(p.units(u).template_id())).bytes,
                  fwdAt[at(u, m)], bwdAt[at(u, m)], m);
  addRegion(s, DeviceRegion::ARENA, 0, plan::largestArenaBytes(p), 0, last);
  addRegion(s, DeviceRegion::WORKSPACE, 0, plan::workspaceBudgetBytes(p), 0, last);
  addRegion(s, DeviceRegion::CONSTANTS, 0, plan::constantsLayout(p).bytes, 0, last);
  placeRegions(s);
  return llvm::Error::success();
}

void placeRegions(plan::StreamSchedule &s) {
  std::vector<plan::Interval> blocks;
  for (const DeviceRegion &r : s.regions()) blocks.push_back({r.first_action(), r.last_action(), r.bytes()});
  int64_t deviceBytes = 0;
  std::vector<int64_t> offsets = plan::placeIntervals(blocks, &deviceBytes);
  for (int i = 0; i < s.regions_size(); ++i) s.mutable_regions(i)->set_offset(offsets[size_t(i)]);
  s.set_device_bytes(deviceBytes);
}

void addPackCache(plan::Plan &p) {
  plan::StreamSchedule &s = *p.mutable_schedule();
  DeviceRegion *workspace = nullptr;
  for (DeviceRegion &r : *s.mutable_regions())
    if (r.kind() == DeviceRegion::WORKSPACE) workspace = &r;
  const int64_t need = plan::packCacheNeedBytes(p), budget = s.gpu_budget_bytes();
  if (!workspace || need == 0) return;
  auto place = [&](int64_t cache) {
    s.set_pack_cache_bytes(cache);
    workspace->set_bytes(plan::workspaceBudgetBytes(p));
    placeRegions(s);
  };
  const int64_t before = s.device_bytes();
  place(need);
  if (s.device_bytes() <= budget) return;
  // What the budget leaves: the region lives the whole step, so the peak
  // grows by its bytes at most.
  const int64_t left = (budget - before) / plan::kAlignment * plan::kAlignment;
  place(std::clamp<int64_t>(left, 0, need));
  if (s.device_bytes() > budget && s.pack_cache_bytes() > 0) place(0);
}

} // namespace megac::codegen
