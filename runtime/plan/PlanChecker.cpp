#include "runtime/plan/PlanChecker.h"

#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/AttentionStash.h"
#include "runtime/plan/Bf16Weights.h"
#include "runtime/plan/StreamLayout.h"
#include "runtime/plan/TokenRows.h"
#include "runtime/plan/UnitPrograms.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

namespace megac::plan {

static llvm::Error violation(llvm::StringRef kind, const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "plan check: " + kind.str() + ": " + m.str());
}

static std::string range(int64_t off, int64_t bytes) {
  int64_t end = 0;
  if (__builtin_add_overflow(off, bytes, &end)) return "bytes [" + std::to_string(off) + ", +" + std::to_string(bytes) + ")";
  return "bytes [" + std::to_string(off) + ", " + std::to_string(end) + ")";
}

llvm::Expected<std::vector<ArenaLife>> arenaLifetimes(const Program &p) {
  const int32_t V = p.values_size(), N = p.ops_size();
  std::vector<ArenaLife> life(static_cast<size_t>(V));
  auto bad = [&](const llvm::Twine &m) { return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str()); };
  // Writers, in op order; every read of a temporary comes after its writer.
  for (int32_t k = 0; k < N; ++k) {
    const Program::Op &op = p.ops(k);
    for (int32_t in : op.inputs()) {
      if (in < -1 || in >= V) return bad("op " + llvm::Twine(k) + " reads value " + llvm::Twine(in) + ", which does not exist");
      if (in >= 0 && p.values(in).kind() == Program::Value::TEMP && !(life[size_t(in)].temp && life[size_t(in)].def < k))
        return bad("op " + llvm::Twine(k) + " reads '" + p.values(in).name() + "' before an op writes it");
    }
    for (int32_t out : op.outputs()) {
      if (out < -1 || out >= V) return bad("op " + llvm::Twine(k) + " writes value " + llvm::Twine(out) + ", which does not exist");
      if (out < 0) continue;
      if (p.values(out).kind() != Program::Value::TEMP)
        return bad("op " + llvm::Twine(k) + " writes '" + p.values(out).name() + "', an argument or constant");
      ArenaLife &l = life[size_t(out)];
      if (l.temp) return bad("'" + p.values(out).name() + "' is written twice");
      l.temp = true;
      l.def = k;
      l.root = out;
      l.bytes = typeBytes(p.values(out).type());
      if (l.bytes < 0) return bad("'" + p.values(out).name() + "' has no size");
      l.bytes = (l.bytes + 255) / 256 * 256;
    }
  }
  // Last readers, sweeping back from the results.
  for (int32_t r : p.results()) {
    if (r < 0 || r >= V) return bad("a result refers to value " + llvm::Twine(r) + ", which does not exist");
    if (p.values(r).kind() == Program::Value::TEMP && !life[size_t(r)].temp) return bad("result '" + p.values(r).name() + "' is never written");
    life[size_t(r)].last = N;
  }
  for (int32_t k = N - 1; k >= 0; --k)
    for (int i = 0; i < p.ops(k).inputs_size(); ++i) {
      const int32_t in = p.ops(k).inputs(i);
      if (in >= 0 && life[size_t(in)].last < 0 && readsBytes(p.ops(k), i)) life[size_t(in)].last = k;
    }
  for (ArenaLife &l : life)
    if (l.temp && l.last < l.def) l.last = l.def;
  // Views sharing a temporary's bytes take its root (ops in order: the input's root is final).
  for (const Program::Op &op : p.ops()) {
    if (op.inputs_size() < 1 || op.outputs_size() < 1 || op.inputs(0) < 0 || op.outputs(0) < 0) continue;
    if (!isViewOp(op.type())) continue;
    const ArenaLife &in = life[size_t(op.inputs(0))];
    ArenaLife &out = life[size_t(op.outputs(0))];
    if (in.temp && typeBytes(p.values(op.inputs(0)).type()) == typeBytes(p.values(op.outputs(0)).type()))
      out.root = in.root;
  }
  return life;
}

llvm::Error checkArena(const Program &prog, const std::string &what) {
  auto life = arenaLifetimes(prog);
  if (!life) return violation("malformed plan", what + ": " + llvm::toString(life.takeError()));
  if (prog.arena_offsets_size() != prog.values_size())
    return violation("malformed plan", what + ": " + llvm::Twine(prog.arena_offsets_size()) + " arena offsets for " +
                                           llvm::Twine(prog.values_size()) + " values");
  std::vector<int32_t> inArena;
  for (int32_t v = 0; v < prog.values_size(); ++v) {
    const ArenaLife &l = (*life)[size_t(v)];
    int64_t off = prog.arena_offsets(v);
    const std::string name = "'" + prog.values(v).name() + "'";
    if (!l.temp) {
      if (off != -1)
        return violation("malformed plan", what + ": value " + name + " is an argument, a constant or unused, but has arena offset " + llvm::Twine(off));
      continue;
    }
    if (off % kAlignment != 0 || !blockWithin(off, l.bytes, prog.arena_bytes()))
      return violation("arena overlap", what + ": value " + name + " at " + range(off, l.bytes) + " is not a 256-aligned block inside the arena of " +
                                            llvm::Twine(prog.arena_bytes()) + " bytes");
    inArena.push_back(v);
  }
  // Sweep by offset: only blocks that start inside another can overlap it.
  std::sort(inArena.begin(), inArena.end(),
            [&](int32_t a, int32_t b) { return prog.arena_offsets(a) < prog.arena_offsets(b); });
  for (size_t i = 0; i < inArena.size(); ++i) {
    int32_t a = inArena[i];
    const ArenaLife &la = (*life)[size_t(a)];
    int64_t oa = prog.arena_offsets(a);
    for (size_t j = i + 1; j < inArena.size() && prog.arena_offsets(inArena[j]) < oa + la.bytes; ++j) {
      int32_t b = inArena[j];
      const ArenaLife &lb = (*life)[size_t(b)];
      int64_t ob = prog.arena_offsets(b);
      if (!bytesOverlap(oa, la.bytes, ob, lb.bytes) || !lifetimesOverlap(la.def, la.last, lb.def, lb.last)) continue;
      if (la.root == lb.root && oa == ob) continue; // a view sharing its input's bytes
      return violation("arena overlap", what + ": values '" + prog.values(a).name() + "' (ops " + llvm::Twine(la.def) + ".." +
                                            llvm::Twine(la.last) + ", " + range(oa, la.bytes) + ") and '" + prog.values(b).name() +
                                            "' (ops " + llvm::Twine(lb.def) + ".." + llvm::Twine(lb.last) + ", " + range(ob, lb.bytes) +
                                            ") are live at once and share bytes");
    }
  }
  return llvm::Error::success();
}

namespace {

// Walks a plan's schedule; each check returns the first violation.
class ScheduleChecker {
public:
  explicit ScheduleChecker(const Plan &p) : p_(p), s_(p.schedule()) {}

  llvm::Error run() {
    if (auto e = structure()) return e;
    if (auto e = simulate()) return e;
    if (auto e = regionsCover()) return e;
    if (auto e = regionsDisjoint()) return e;
    if (s_.device_bytes() > s_.gpu_budget_bytes())
      return violation("over budget", "the plan needs " + llvm::Twine(s_.device_bytes()) + " bytes of GPU memory; the budget is " +
                                          llvm::Twine(s_.gpu_budget_bytes()) + " bytes");
    return llvm::Error::success();
  }

private:
  const Plan &p_;
  const StreamSchedule &s_;
  int K_ = 0, G_ = 0, N_ = 0, M_ = 1; // M_: micro-batches per pass
  std::map<std::string, int> eventId_;
  std::vector<int> producer_;                          // activation -> unit, -1 for data
  std::vector<std::vector<std::pair<int, int>>> users_; // activation -> (unit, input position)
  std::vector<int> fwdAt_, bwdAt_;                     // (unit, micro-batch) -> action index: at()
  std::vector<int> offAt_, updAt_;                     // unit -> action index
  std::vector<int> unreadAt_;                          // unit -> its UPDATE_UNREAD_ROWS, -1 none
  size_t at(int u, int mb) const { return size_t(u) * size_t(M_) + size_t(mb); }
  // A unit's last BACKWARD of the pass: the one whose gradients leave the slot.
  int lastBwd(int u) const { return bwdAt_[at(u, M_ - 1)]; }
  std::vector<int> fetchAt_, wbAt_;                    // unit -> its FETCH_MOMENTS, WRITEBACK (adamw_on_gpu units)
  bool moments_ = false;                               // the schedule has moment slots (anyAdamwOnGpu)
  bool onGpu(int u) const { return adamwOnGpu(p_.units(u)); }

  std::string unitName(int u) const { return "'" + p_.units(u).name() + "'"; }
  std::string actionText(int i) const {
    const StreamAction &a = s_.actions(i);
    std::string t = "action " + std::to_string(i) + " (" + actionKindName(a.kind()) + " of " + unitName(a.unit());
    if (a.weight_slot() >= 0) t += ", weight slot " + std::to_string(a.weight_slot());
    if (a.grad_slot() >= 0) t += ", grad slot " + std::to_string(a.grad_slot());
    if (isCheckpointCopy(a.kind()) && a.activation() >= 0 && a.activation() < p_.activations_size())
      t += ", " + activationName(a.activation());
    if (M_ > 1 && (a.kind() == StreamAction::FORWARD || a.kind() == StreamAction::BACKWARD || isCheckpointCopy(a.kind())))
      t += ", micro-batch " + std::to_string(a.micro_batch());
    return t + ")";
  }
  std::string actionRef(int i) const { return i < 0 ? std::string("no action") : actionText(i); }
  std::string activationName(int a) const { return "'" + p_.activations(a).name() + "'"; }
  // Whether the unit's gradients have left its grad slot: offloaded, or
  // (resident, adamw_on_gpu) applied by its UPDATE.
  bool gradsRead(int u) const { return (p_.units(u).resident() || onGpu(u) ? updAt_ : offAt_)[size_t(u)] >= 0; }
  bool gradFlows(int unit, int inputPos) const {
    const Template &t = p_.templates(p_.units(unit).template_id());
    return inputPos < t.input_has_gradient_size() && t.input_has_gradient(inputPos);
  }

  llvm::Error structure() {
    K_ = s_.weight_slots();
    G_ = s_.grad_slots();
    N_ = p_.units_size();
    M_ = passMicroBatches(s_);
    if (M_ > (1 << 20)) return violation("malformed plan", "the schedule carries " + llvm::Twine(M_) + " micro-batches a pass");
    {
      const int64_t accum = std::max<int64_t>(p_.optimizer().grad_accum(), 1);
      if (accum % M_ != 0)
        return violation("malformed plan", "the schedule carries " + llvm::Twine(M_) + " micro-batches a pass, which does not divide the step's " +
                                               llvm::Twine(accum));
    }
    if (s_.overlap_steps() && stepKeepsGradients(p_))
      return violation("malformed plan", "the steps overlap, but a step keeps its gradients until its end (clip, more than one pass, or several GPUs)");
    if (p_.gpus() < 0 || p_.gpus() > 64)
      return violation("malformed plan", "the plan runs on " + llvm::Twine(p_.gpus()) + " GPUs (0 to 64)");
    if (planGpus(p_) > 1)
      for (const Unit &u : p_.units())
        if (u.resident() || u.adamw_on_gpu())
          return violation("several GPUs", "unit '" + u.name() + "' is " + (u.resident() ? "resident" : "stepped on the GPU") + " in a plan for " +
                                               llvm::Twine(p_.gpus()) + " GPUs, whose host sums every unit's gradients before its AdamW");
    if (K_ < 1 || G_ < 1) return violation("malformed plan", "the schedule has " + llvm::Twine(K_) + " weight slots and " + llvm::Twine(G_) + " grad slots");
    if (s_.small_grad_slots() < 0 || s_.small_grad_slots() >= G_ ||
        (s_.small_grad_slots() > 0 && (s_.small_grad_slot_bytes() <= 0 || s_.small_grad_slot_bytes() >= s_.grad_slot_bytes())))
      return violation("malformed plan", "the schedule has " + llvm::Twine(s_.small_grad_slots()) + " small grad slots of " +
                                             llvm::Twine(s_.small_grad_slot_bytes()) + " bytes beside " + llvm::Twine(G_) +
                                             " grad slots of " + llvm::Twine(s_.grad_slot_bytes()));
    for (int i = 0; i < s_.events_size(); ++i) eventId_[s_.events(i)] = i;
    moments_ = anyAdamwOnGpu(p_);
    std::vector<char> kinds{'w', 'g', 's'};
    if (moments_) kinds.push_back('m');
    for (char kind : kinds)
      for (int k = 0; k < (kind == 'w' || kind == 'm' ? K_ : G_); ++k)
        for (bool ready : {true, false})
          if (!eventId_.count(slotEventName(kind, k, ready)))
            return violation("malformed plan", "the schedule has no event " + slotEventName(kind, k, ready));
    // Overlapping steps: each streamed unit stepped on the host has its "updated" event.
    updatedEvent_.assign(size_t(N_), -1);
    updatedOwner_.assign(size_t(s_.events_size()), -1);
    for (int u = 0; s_.overlap_steps() && u < N_; ++u) {
      if (!steppedOnHost(p_.units(u))) continue;
      auto it = eventId_.find(unitUpdatedEventName(u));
      if (it == eventId_.end())
        return violation("malformed plan", "the steps overlap, but the schedule has no event " + unitUpdatedEventName(u) +
                                               " (unit " + unitName(u) + " steps on the host)");
      updatedEvent_[size_t(u)] = it->second;
      updatedOwner_[size_t(it->second)] = u;
    }
    const int A = p_.activations_size();
    producer_.assign(size_t(A), -1);
    users_.assign(size_t(A), {});
    for (int u = 0; u < N_; ++u) {
      const Unit &unit = p_.units(u);
      if (unit.template_id() < 0 || unit.template_id() >= p_.templates_size())
        return violation("malformed plan", "unit " + unitName(u) + " has no template " + llvm::Twine(unit.template_id()));
      for (int32_t id : unit.parameters())
        if (id < 0 || id >= p_.parameters_size()) return violation("malformed plan", "unit " + unitName(u) + " binds parameter " + llvm::Twine(id) + ", which does not exist");
      if ((unit.resident() || unit.adamw_on_gpu()) && !canBeResident(p_, u))
        return violation("malformed plan", "unit " + unitName(u) + (unit.resident() ? " is resident" : " runs its AdamW on the GPU") +
                                               ", but it shares a parameter with another unit or has none");
      for (int32_t a : unit.activation_outputs()) {
        if (a < 0 || a >= A) return violation("malformed plan", "unit " + unitName(u) + " writes activation " + llvm::Twine(a) + ", which does not exist");
        if (producer_[size_t(a)] >= 0) return violation("malformed plan", "activation " + activationName(a) + " is written by two units");
        producer_[size_t(a)] = u;
      }
      for (int k = 0; k < unit.activation_inputs_size(); ++k) {
        int32_t a = unit.activation_inputs(k);
        if (a < 0 || a >= A) return violation("malformed plan", "unit " + unitName(u) + " reads activation " + llvm::Twine(a) + ", which does not exist");
        users_[size_t(a)].push_back({u, k});
      }
    }
    for (int i = 0; i < s_.actions_size(); ++i) {
      const StreamAction &a = s_.actions(i);
      if (a.unit() < 0 || a.unit() >= N_) return violation("malformed plan", "action " + llvm::Twine(i) + " names unit " + llvm::Twine(a.unit()) + ", which does not exist");
      // A resident unit's weights never move and its UPDATE runs on the GPU.
      const bool resident = p_.units(a.unit()).resident();
      if (resident && (a.kind() == StreamAction::PREFETCH || a.kind() == StreamAction::OFFLOAD))
        return violation("malformed plan", actionText(i) + ": unit " + unitName(a.unit()) + " is resident; its weights and gradients stay on the GPU");
      // An adamw_on_gpu unit's gradients stay on the GPU; only such a unit's moments move.
      const bool gpuAdamw = onGpu(a.unit());
      const bool momentAction = a.kind() == StreamAction::FETCH_MOMENTS || a.kind() == StreamAction::WRITEBACK;
      if ((gpuAdamw && a.kind() == StreamAction::OFFLOAD) || (!gpuAdamw && momentAction))
        return violation("malformed plan", actionText(i) + ": unit " + unitName(a.unit()) +
                                               (gpuAdamw ? " runs its AdamW on the GPU; its gradients stay there"
                                                         : " does not run its AdamW on the GPU while it streams"));
      StreamAction::Stream want = a.kind() == StreamAction::PREFETCH || a.kind() == StreamAction::FETCH_MOMENTS ||
                                          a.kind() == StreamAction::LOAD_CHECKPOINT
                                      ? StreamAction::H2D
                                  : a.kind() == StreamAction::OFFLOAD || a.kind() == StreamAction::WRITEBACK ||
                                          a.kind() == StreamAction::SAVE_CHECKPOINT
                                      ? StreamAction::D2H
                                  : (a.kind() == StreamAction::UPDATE && !resident && !gpuAdamw) ||
                                          a.kind() == StreamAction::UPDATE_UNREAD_ROWS
                                      ? StreamAction::CPU
                                                                                                          : StreamAction::COMPUTE;
      if (a.stream() != want)
        return violation("malformed plan", actionText(i) + " is on stream " + streamName(a.stream()) + ", not " + streamName(want));
      bool usesWeights = (!resident && (a.kind() == StreamAction::PREFETCH || a.kind() == StreamAction::FORWARD ||
                                        a.kind() == StreamAction::BACKWARD)) ||
                         momentAction || (gpuAdamw && a.kind() == StreamAction::UPDATE);
      bool usesGrads = a.kind() == StreamAction::BACKWARD || a.kind() == StreamAction::OFFLOAD || a.kind() == StreamAction::UPDATE;
      if (usesWeights != (a.weight_slot() >= 0) || a.weight_slot() >= K_)
        return violation("malformed plan", actionText(i) + " has weight slot " + llvm::Twine(a.weight_slot()) + " (of " + llvm::Twine(K_) + ")");
      if (usesGrads != (a.grad_slot() >= 0) || a.grad_slot() >= G_)
        return violation("malformed plan", actionText(i) + " has grad slot " + llvm::Twine(a.grad_slot()) + " (of " + llvm::Twine(G_) + ")");
      if (usesGrads && a.unit() >= 0 && a.unit() < p_.units_size())
        if (const int64_t need = unitWeightLayout(p_, a.unit()).bytes, have = gradSlotBytes(s_, a.grad_slot()); have < need)
          return violation("region size", actionText(i) + ": grad slot " + llvm::Twine(a.grad_slot()) + " holds " +
                                              llvm::Twine(have) + " bytes, the unit's gradients " + llvm::Twine(need));
      const bool compute = a.kind() == StreamAction::FORWARD || a.kind() == StreamAction::BACKWARD || isCheckpointCopy(a.kind());
      if (a.micro_batch() < 0 || a.micro_batch() >= (compute ? M_ : 1))
        return violation("malformed plan", "action " + llvm::Twine(i) + " has micro-batch " + llvm::Twine(a.micro_batch()) + " (the pass carries " +
                                               llvm::Twine(M_) + (compute ? ")" : "; only FORWARD, BACKWARD and the checkpoint copies name one)"));
      if (isCheckpointCopy(a.kind()))
        if (auto e = checkpointCopy(i)) return e;
      for (int32_t e : a.waits())
        if (e < 0 || e >= s_.events_size()) return violation("malformed plan", actionText(i) + " waits event " + llvm::Twine(e) + ", which does not exist");
      for (int32_t e : a.records())
        if (e < 0 || e >= s_.events_size()) return violation("malformed plan", actionText(i) + " records event " + llvm::Twine(e) + ", which does not exist");
    }
    return offloadedPairs();
  }

  // --- checkpoint offload ---
  struct Offloaded {
    int save = -1, load = -1;
    int freed = -1; // the first compute action that waited for the SAVE_CHECKPOINT
  };
  std::map<std::pair<int, int>, Offloaded> offloaded_; // (activation, micro-batch)
  const Offloaded *offloadedOf(int act, int mb) const {
    auto it = offloaded_.find({act, mb});
    return it == offloaded_.end() ? nullptr : &it->second;
  }

  llvm::Error checkpointCopy(int i) {
    const StreamAction &a = s_.actions(i);
    const int act = a.activation();
    if (act < 0 || act >= p_.activations_size() || producer_[size_t(act)] != a.unit() ||
        p_.activations(act).kind() != Activation::INTERMEDIATE || users_[size_t(act)].empty())
      return violation("malformed plan", actionText(i) + " copies activation " + llvm::Twine(act) +
                                             ", which is not a checkpoint its unit writes and another unit reads");
    const int64_t bytes = typeBytes(p_.activations(act).type());
    if (a.host_offset() % kAlignment != 0 || !blockWithin(a.host_offset(), bytes, s_.pinned_checkpoint_bytes()))
      return violation("region overlap", actionText(i) + ": host " + range(a.host_offset(), bytes) +
                                             " is not a 256-aligned block inside the pinned checkpoint memory of " +
                                             llvm::Twine(s_.pinned_checkpoint_bytes()) + " bytes");
    Offloaded &o = offloaded_[{act, a.micro_batch()}];
    int &slot = a.kind() == StreamAction::SAVE_CHECKPOINT ? o.save : o.load;
    if (slot >= 0) return violation("malformed plan", actionText(i) + ": the checkpoint already has one (" + actionText(slot) + ")");
    slot = i;
    return llvm::Error::success();
  }

  // Each offloaded checkpoint goes out once and comes back once, to and from
  // the same host bytes, which no other checkpoint's overlap.
  llvm::Error offloadedPairs() {
    std::vector<std::pair<int64_t, int>> blocks; // (host offset, its SAVE)
    for (const auto &[key, o] : offloaded_) {
      if (o.save < 0 || o.load < 0)
        return violation("malformed plan", actionText(o.save >= 0 ? o.save : o.load) + ": the checkpoint has no " +
                                               (o.save < 0 ? "SAVE_CHECKPOINT" : "LOAD_CHECKPOINT"));
      if (s_.actions(o.save).host_offset() != s_.actions(o.load).host_offset())
        return violation("read before write", actionText(o.load) + " reads host bytes at " + llvm::Twine(s_.actions(o.load).host_offset()) +
                                                  ", but " + actionText(o.save) + " wrote them at " + llvm::Twine(s_.actions(o.save).host_offset()));
      blocks.push_back({s_.actions(o.save).host_offset(), o.save});
    }
    std::sort(blocks.begin(), blocks.end());
    for (size_t k = 1; k < blocks.size(); ++k) {
      const StreamAction &prev = s_.actions(blocks[k - 1].second);
      if (blocks[k].first < prev.host_offset() + checkpointCopyBytes(p_, prev))
        return violation("region overlap", actionText(blocks[k].second) + " and " + actionText(blocks[k - 1].second) +
                                               " share host bytes of the pinned checkpoint memory");
    }
    return llvm::Error::success();
  }

  // Whether action i waits an event whose latest record is action `by`.
  bool waitsFor(int i, int by) const {
    for (int32_t e : s_.actions(i).waits())
      if (latest_[size_t(e)] == by) return true;
    return false;
  }

  // --- the simulation of the actions in issue order ---
  std::vector<int> latest_; // event -> the action that recorded it last, -1 if none yet
  // Overlapping steps: per unit its "u<k>.updated" event (-1: none), and per
  // event the unit whose UPDATE alone may record it.
  std::vector<int> updatedEvent_, updatedOwner_;

  int ev(char kind, int slot, bool ready) const { return eventId_.at(slotEventName(kind, slot, ready)); }
  static bool waits(const StreamAction &a, int e) {
    return std::find(a.waits().begin(), a.waits().end(), e) != a.waits().end();
  }

  // Action i must wait event e, and e's latest record must be `expected`.
  llvm::Error requireWait(int i, char kind, int slot, bool ready, int expected, llvm::StringRef violationKind,
                          llvm::StringRef why) {
    int e = ev(kind, slot, ready);
    if (!waits(s_.actions(i), e))
      return violation(violationKind, actionText(i) + " does not wait " + s_.events(e) + " (" + why + ": " + actionRef(expected) + ")");
    if (latest_[size_t(e)] != expected)
      return violation(violationKind, actionText(i) + " waits " + s_.events(e) + ", last recorded by " + actionRef(latest_[size_t(e)]) +
                                          ", but " + why + " is " + actionRef(expected));
    return llvm::Error::success();
  }

  llvm::Error firstTime(std::vector<int> &books, int i, const char *what) {
    return firstTime(books, size_t(s_.actions(i).unit()), i, what);
  }
  llvm::Error firstTime(std::vector<int> &books, size_t slot, int i, const char *what) {
    int u = s_.actions(i).unit();
    if (books[slot] >= 0) return violation("malformed plan", actionText(i) + ": unit " + unitName(u) + " already has a " + what + " (" + actionText(books[slot]) + ")");
    books[slot] = i;
    return llvm::Error::success();
  }

  llvm::Error simulate() {
    latest_.assign(size_t(s_.events_size()), -1);
    fwdAt_.assign(size_t(N_) * size_t(M_), -1);
    bwdAt_ = fwdAt_;
    offAt_.assign(size_t(N_), -1);
    updAt_ = fetchAt_ = wbAt_ = unreadAt_ = offAt_;
    // lastCompute: a weight slot's last reader (a compute, or the WRITEBACK of
    // an adamw_on_gpu unit); awaitingWriteback: such a unit whose BACKWARD used
    // the slot and whose WRITEBACK has not been issued yet (-1: none).
    std::vector<int> lastPrefetch(size_t(K_), -1), lastCompute(size_t(K_), -1), awaitingWriteback(size_t(K_), -1);
    std::vector<int> lastFetch(size_t(K_), -1), lastMomentRelease(size_t(K_), -1); // moment slots
    // A copy into slot k (weight or moment) must come after the WRITEBACK that empties it.
    auto writtenBack = [&](int i, const char *slot) -> llvm::Error {
      const int k = s_.actions(i).weight_slot();
      if (int w = awaitingWriteback[size_t(k)]; w >= 0)
        return violation("slot reused early", actionText(i) + " overwrites " + slot + " slot " + llvm::Twine(k) +
                                                  " before the WRITEBACK of " + unitName(w));
      return llvm::Error::success();
    };
    std::vector<int> lastBackwardInto(size_t(G_), -1), lastOffload(size_t(G_), -1), lastUpdate(size_t(G_), -1);
    std::vector<int> lastGradRelease(size_t(G_), -1); // the OFFLOAD, or a resident unit's UPDATE, that last read a grad slot
    // Overlapping steps: a step starts while the previous step's host AdamW
    // may still run. A wait made before this step records its event refers to
    // the previous step's last record; these must be the UPDATE named
    // (checked once the whole step is seen): (action, event, what it guards).
    struct Carried {
      int action, event;
      std::string why;
    };
    std::vector<Carried> carried;
    std::vector<int> firstPrefetch(size_t(N_), -1); // unit -> its first PREFETCH of the pass
    int lastComputeIssued = -1;
    for (int i = 0; i < s_.actions_size(); ++i) {
      const StreamAction &a = s_.actions(i);
      const int u = a.unit(), k = a.weight_slot(), g = a.grad_slot();
      for (int32_t r : a.records())
        if (int owner = updatedOwner_[size_t(r)]; owner >= 0 && (a.kind() != StreamAction::UPDATE || u != owner))
          return violation("malformed plan", actionText(i) + " records " + s_.events(r) + ", which only the UPDATE of unit " +
                                                 unitName(owner) + " records");
      switch (a.kind()) {
      case StreamAction::PREFETCH:
        if (auto e = writtenBack(i, "weight")) return e;
        // Its first copy of the unit's weights reads what the previous
        // step's host AdamW wrote, of every unit sharing a parameter.
        if (s_.overlap_steps() && firstPrefetch[size_t(u)] < 0)
          for (int v : unitsSharingParameters(p_, u)) {
            const int e = updatedEvent_[size_t(v)];
            if (e < 0) continue;
            const std::string why = "the previous step's UPDATE of unit " + unitName(v) + " writes the weights it copies";
            if (!waits(a, e)) return violation("missing wait", actionText(i) + " does not wait " + s_.events(e) + " (" + why + ")");
            if (latest_[size_t(e)] < 0) carried.push_back({i, e, why});
          }
        if (firstPrefetch[size_t(u)] < 0) firstPrefetch[size_t(u)] = i;
        if (lastCompute[size_t(k)] >= 0)
          if (auto e = requireWait(i, 'w', k, false, lastCompute[size_t(k)], "slot reused early", "the slot's last reader"))
            return e;
        lastPrefetch[size_t(k)] = i;
        break;
      case StreamAction::FORWARD:
      case StreamAction::BACKWARD: {
        if (k >= 0) { // a resident unit's weights are in its RESIDENT region
          int pf = lastPrefetch[size_t(k)];
          if (pf < 0 || s_.actions(pf).unit() != u)
            return violation("read before prefetch", actionText(i) + " reads weight slot " + llvm::Twine(k) + ", whose last PREFETCH is " + actionRef(pf) +
                                                         ", not one of unit " + unitName(u));
          if (auto e = requireWait(i, 'w', k, true, pf, waits(a, ev('w', k, true)) ? "read before prefetch" : "missing wait", "the PREFETCH of its weights"))
            return e;
          lastCompute[size_t(k)] = i;
        }
        const int mb = a.micro_batch();
        if (a.kind() == StreamAction::FORWARD) {
          if (auto e = firstTime(fwdAt_, at(u, mb), i, "FORWARD")) return e;
          for (int32_t in : p_.units(u).activation_inputs()) {
            int pu = producer_[size_t(in)];
            if (pu >= 0 && fwdAt_[at(pu, mb)] < 0)
              return violation("read before write", actionText(i) + " reads activation " + activationName(in) + " before the FORWARD of " + unitName(pu) + " writes it");
          }
          break;
        }
        if (auto e = firstTime(bwdAt_, at(u, mb), i, "BACKWARD")) return e;
        if (onGpu(u)) awaitingWriteback[size_t(k)] = u;
        if (fwdAt_[at(u, mb)] < 0) return violation("read before write", actionText(i) + " comes before the unit's FORWARD");
        for (int32_t out : p_.units(u).activation_outputs())
          for (auto [c, pos] : users_[size_t(out)])
            if (gradFlows(c, pos) && bwdAt_[at(c, mb)] < 0)
              return violation("read before write", actionText(i) + " reads the gradient of " + activationName(out) + " before the BACKWARD of " + unitName(c) + " adds to it");
        if (mb > 0) {
          // It adds to the sum the unit's earlier micro-batches left in the
          // slot: the last BACKWARD into it must be the unit's previous one,
          // with nothing reading the slot since (on the same stream, in order).
          const int prev = bwdAt_[at(u, mb - 1)];
          if (prev < 0 || lastBackwardInto[size_t(g)] != prev || lastGradRelease[size_t(g)] > prev)
            return violation("read before write", actionText(i) + " adds to grad slot " + llvm::Twine(g) + ", but the slot does not hold the unit's gradients of micro-batch " +
                                                      llvm::Twine(mb - 1) + " (its last BACKWARD is " + actionRef(lastBackwardInto[size_t(g)]) + ")");
          lastBackwardInto[size_t(g)] = i;
          break;
        }
        if (int prev = lastBackwardInto[size_t(g)]; prev >= 0 && !gradsRead(s_.actions(prev).unit()))
          return violation("slot reused early", actionText(i) + " overwrites grad slot " + llvm::Twine(g) + " before it is offloaded (" + actionText(prev) + " wrote it)");
        if (lastGradRelease[size_t(g)] >= 0)
          if (auto e = requireWait(i, 'g', g, false, lastGradRelease[size_t(g)], "slot reused early", "the grad slot's last reader"))
            return e;
        lastBackwardInto[size_t(g)] = i;
        break;
      }
      case StreamAction::OFFLOAD: {
        int b = lastBwd(u);
        if (b < 0 || s_.actions(b).grad_slot() != g)
          return violation("read before write", actionText(i) + " reads grad slot " + llvm::Twine(g) + ", but the unit's BACKWARD (" + actionRef(b) + ") did not write it");
        if (auto e = requireWait(i, 'g', g, true, b, waits(a, ev('g', g, true)) ? "read before write" : "missing wait", "the BACKWARD that wrote it"))
          return e;
        if (int prev = lastOffload[size_t(g)]; prev >= 0 && updAt_[size_t(s_.actions(prev).unit())] < 0)
          return violation("slot reused early", actionText(i) + " overwrites staging slot " + llvm::Twine(g) + " before the UPDATE of " +
                                                    unitName(s_.actions(prev).unit()) + " read it");
        if (lastUpdate[size_t(g)] >= 0) {
          if (auto e = requireWait(i, 's', g, false, lastUpdate[size_t(g)], "slot reused early", "the staging slot's last UPDATE"))
            return e;
        } else if (s_.overlap_steps()) { // the previous step's last UPDATE from the slot may still read it
          const int e = ev('s', g, false);
          const std::string why = "the previous step's last UPDATE from staging slot " + std::to_string(g) + " reads it";
          if (!waits(a, e)) return violation("slot reused early", actionText(i) + " does not wait " + s_.events(e) + " (" + why + ")");
          carried.push_back({i, e, why});
        }
        if (auto e = firstTime(offAt_, i, "OFFLOAD")) return e;
        lastOffload[size_t(g)] = lastGradRelease[size_t(g)] = i;
        break;
      }
      case StreamAction::FETCH_MOMENTS: {
        if (auto e = writtenBack(i, "moment")) return e;
        if (lastMomentRelease[size_t(k)] >= 0)
          if (auto e = requireWait(i, 'm', k, false, lastMomentRelease[size_t(k)], "slot reused early", "the moment slot's last WRITEBACK"))
            return e;
        if (auto e = firstTime(fetchAt_, i, "FETCH_MOMENTS")) return e;
        lastFetch[size_t(k)] = i;
        break;
      }
      case StreamAction::WRITEBACK: {
        int up = updAt_[size_t(u)];
        if (up < 0 || s_.actions(up).weight_slot() != k)
          return violation("read before write", actionText(i) + " reads weight slot " + llvm::Twine(k) + ", but the unit's UPDATE (" + actionRef(up) + ") did not step it");
        if (auto e = requireWait(i, 'm', k, true, up, waits(a, ev('m', k, true)) ? "read before write" : "missing wait", "the UPDATE that stepped it"))
          return e;
        if (auto e = firstTime(wbAt_, i, "WRITEBACK")) return e;
        lastCompute[size_t(k)] = lastMomentRelease[size_t(k)] = i;
        awaitingWriteback[size_t(k)] = -1;
        break;
      }
      case StreamAction::UPDATE: {
        if (onGpu(u)) { // from its grad slot into its weight and moment slots, on the compute stream
          int b = lastBwd(u);
          if (b < 0 || s_.actions(b).grad_slot() != g || s_.actions(b).weight_slot() != k)
            return violation("read before write", actionText(i) + " reads grad slot " + llvm::Twine(g) + " and weight slot " + llvm::Twine(k) +
                                                      ", but the unit's BACKWARD (" + actionRef(b) + ") did not use them");
          if (auto e = requireWait(i, 'g', g, true, b, waits(a, ev('g', g, true)) ? "read before write" : "missing wait", "the BACKWARD that wrote it"))
            return e;
          int f = fetchAt_[size_t(u)];
          if (f < 0 || lastFetch[size_t(k)] != f)
            return violation("read before prefetch", actionText(i) + " reads moment slot " + llvm::Twine(k) + ", whose last FETCH_MOMENTS is " +
                                                         actionRef(lastFetch[size_t(k)]) + ", not one of unit " + unitName(u));
          if (auto e = requireWait(i, 'm', k, true, f, waits(a, ev('m', k, true)) ? "read before prefetch" : "missing wait", "the FETCH_MOMENTS of its moments"))
            return e;
          if (auto e = firstTime(updAt_, i, "UPDATE")) return e;
          lastGradRelease[size_t(g)] = i;
          break;
        }
        if (p_.units(u).resident()) { // from the grad slot its BACKWARD wrote, on the same stream
          int b = lastBwd(u);
          if (b < 0 || s_.actions(b).grad_slot() != g)
            return violation("read before write", actionText(i) + " reads grad slot " + llvm::Twine(g) + ", but the unit's BACKWARD (" + actionRef(b) + ") did not write it");
          if (auto e = requireWait(i, 'g', g, true, b, waits(a, ev('g', g, true)) ? "read before write" : "missing wait", "the BACKWARD that wrote it"))
            return e;
          if (auto e = firstTime(updAt_, i, "UPDATE")) return e;
          lastGradRelease[size_t(g)] = i;
          break;
        }
        int o = offAt_[size_t(u)];
        if (o < 0 || s_.actions(o).grad_slot() != g)
          return violation("read before write", actionText(i) + " reads staging slot " + llvm::Twine(g) + ", but the unit's OFFLOAD (" + actionRef(o) + ") did not fill it");
        if (auto e = requireWait(i, 's', g, true, o, waits(a, ev('s', g, true)) ? "read before write" : "missing wait", "the OFFLOAD that filled it"))
          return e;
        if (auto e = firstTime(updAt_, i, "UPDATE")) return e;
        lastUpdate[size_t(g)] = i;
        break;
      }
      case StreamAction::UPDATE_UNREAD_ROWS: {
        // AdamW on the masters of the rows no token reads: once the forward's
        // copy of the unit has read them, and before its UPDATE (runtime/plan/TokenRows.h).
        if (unreadRowsParameters(p_, u).empty())
          return violation("malformed plan", actionText(i) + ": unit " + unitName(u) +
                                                 " has no token-indexed table that steps on the host without --clip");
        const int f = firstPrefetch[size_t(u)];
        if (f < 0)
          return violation("read before prefetch", actionText(i) + " steps the masters before the forward's PREFETCH of unit " +
                                                       unitName(u) + " has copied them");
        if (!waitsFor(i, f))
          return violation("missing wait", actionText(i) + " waits no event of " + actionText(f) + ", which copies the masters it steps");
        if (updAt_[size_t(u)] >= 0)
          return violation("malformed plan", actionText(i) + " comes after the unit's UPDATE (" + actionText(updAt_[size_t(u)]) + ")");
        if (auto e = firstTime(unreadAt_, i, "UPDATE_UNREAD_ROWS")) return e;
        break;
      }
      case StreamAction::SAVE_CHECKPOINT: {
        const int f = fwdAt_[at(u, a.micro_batch())];
        if (f < 0)
          return violation("read before write", actionText(i) + " copies " + activationName(a.activation()) + " before the FORWARD that writes it");
        if (!waitsFor(i, f))
          return violation("missing wait", actionText(i) + " waits no event of " + actionText(f) + ", which writes what it copies");
        break;
      }
      case StreamAction::LOAD_CHECKPOINT: {
        const Offloaded &o = *offloadedOf(a.activation(), a.micro_batch());
        if (o.save > i || o.freed < 0)
          return violation("read before write", actionText(i) + " reads the host's copy before a compute action has waited for " +
                                                    (o.save > i ? "its SAVE_CHECKPOINT" : actionText(o.save)));
        // The bytes it writes may be what any earlier compute action read.
        if (lastComputeIssued >= 0 && !waitsFor(i, lastComputeIssued))
          return violation("missing wait", actionText(i) + " waits no event of " + actionText(lastComputeIssued) +
                                               ", the compute stream's last action before it (its region may reuse what that reads)");
        break;
      }
      default: return violation("malformed plan", "action " + llvm::Twine(i) + " has an unknown kind");
      }
      if (a.stream() == StreamAction::COMPUTE) {
        // The first compute action to wait for a SAVE_CHECKPOINT frees the checkpoint's CHECKPOINT region.
        for (int32_t e : a.waits())
          if (int by = latest_[size_t(e)]; by >= 0 && s_.actions(by).kind() == StreamAction::SAVE_CHECKPOINT)
            if (Offloaded &o = offloaded_[{s_.actions(by).activation(), s_.actions(by).micro_batch()}]; o.freed < 0) o.freed = i;
        // A BACKWARD reads an offloaded checkpoint as its LOAD_CHECKPOINT brought it back.
        if (a.kind() == StreamAction::BACKWARD)
          for (int32_t in : p_.units(u).activation_inputs())
            if (const Offloaded *o = offloadedOf(in, a.micro_batch())) {
              if (o->load > i)
                return violation("read before write", actionText(i) + " reads " + activationName(in) + " before its LOAD_CHECKPOINT (" + actionText(o->load) + ")");
              if (!waitsFor(i, o->load))
                return violation("missing wait", actionText(i) + " waits no event of " + actionText(o->load) + ", which brings back the " +
                                                     activationName(in) + " it reads");
            }
        lastComputeIssued = i;
      }
      for (int32_t e : a.records()) latest_[size_t(e)] = i;
    }
    // What the previous step recorded last: the same action list's last record.
    for (const Carried &c : carried) {
      const int last = latest_[size_t(c.event)];
      const bool ok = last >= 0 && s_.actions(last).kind() == StreamAction::UPDATE &&
                      (updatedOwner_[size_t(c.event)] < 0 || s_.actions(last).unit() == updatedOwner_[size_t(c.event)]) &&
                      (updatedOwner_[size_t(c.event)] >= 0 || last == lastUpdate[size_t(s_.actions(c.action).grad_slot())]);
      if (!ok)
        return violation("missing wait", actionText(c.action) + " waits " + s_.events(c.event) + ", which the step records last by " +
                                             actionRef(last) + ", but " + c.why);
    }
    for (int u = 0; u < N_; ++u) {
      for (int mb = 0; mb < M_; ++mb)
        for (auto [books, what] : {std::pair<const std::vector<int> *, const char *>{&fwdAt_, "FORWARD"}, {&bwdAt_, "BACKWARD"}})
          if ((*books)[at(u, mb)] < 0)
            return violation("malformed plan", "unit " + unitName(u) + " has no " + what + (M_ > 1 ? " of micro-batch " + std::to_string(mb) : std::string()));
      for (auto [books, what] : {std::pair<const std::vector<int> *, const char *>{&offAt_, "OFFLOAD"}, {&updAt_, "UPDATE"}})
        if ((*books)[size_t(u)] < 0 && !(books == &offAt_ && (p_.units(u).resident() || onGpu(u))))
          return violation("malformed plan", "unit " + unitName(u) + " has no " + what);
      if (onGpu(u) && (fetchAt_[size_t(u)] < 0 || wbAt_[size_t(u)] < 0))
        return violation("malformed plan", "unit " + unitName(u) + " runs its AdamW on the GPU but has no " +
                                               (fetchAt_[size_t(u)] < 0 ? "FETCH_MOMENTS" : "WRITEBACK"));
    }
    for (const auto &[key, o] : offloaded_)
      if (o.freed < 0)
        return violation("missing wait", "no compute action waits for " + actionText(o.save) + " (its CHECKPOINT region is never free)");
    return llvm::Error::success();
  }

  // --- regions ---
  std::string regionText(const DeviceRegion &r) const {
    std::string t = std::string(regionKindName(r.kind())) + " " + std::to_string(r.index());
    if ((r.kind() == DeviceRegion::CHECKPOINT || r.kind() == DeviceRegion::ACTIVATION_GRAD || r.kind() == DeviceRegion::DATA ||
         r.kind() == DeviceRegion::LOADED_CHECKPOINT) &&
        r.index() >= 0 && r.index() < p_.activations_size())
      t += " (" + activationName(r.index()) + ")";
    if (r.micro_batch() != 0) t += " of micro-batch " + std::to_string(r.micro_batch());
    return t + " (actions " + std::to_string(r.first_action()) + ".." + std::to_string(r.last_action()) + ", " + range(r.offset(), r.bytes()) + ")";
  }

  // (kind, index, micro-batch) -> the region; built once.
  std::map<std::tuple<int, int, int>, const DeviceRegion *> regionIndex_;
  const DeviceRegion *find(DeviceRegion::Kind kind, int index, int mb) {
    if (regionIndex_.empty())
      for (const DeviceRegion &r : s_.regions()) regionIndex_.emplace(std::make_tuple(int(r.kind()), r.index(), r.micro_batch()), &r);
    auto it = regionIndex_.find({int(kind), index, mb});
    return it == regionIndex_.end() ? nullptr : it->second;
  }

  // The region (kind, index, micro-batch) exists, holds `bytes` and lives over [first, last].
  llvm::Error require(DeviceRegion::Kind kind, int index, int64_t bytes, int first, int last, const std::string &what, int mb = 0) {
    const DeviceRegion *r = find(kind, index, mb);
    if (!r) return violation("malformed plan", "no " + std::string(regionKindName(kind)) + " region " + std::to_string(index) +
                                                   (mb ? " of micro-batch " + std::to_string(mb) : std::string()) + " (" + what + ")");
    if (r->bytes() < bytes)
      return violation("region size", regionText(*r) + " holds fewer than the " + llvm::Twine(bytes) + " bytes of " + what);
    if (r->first_action() > first || r->last_action() < last)
      return violation("region lifetime", regionText(*r) + " does not cover actions " + llvm::Twine(first) + ".." + llvm::Twine(last) + " (" + what + ")");
    return llvm::Error::success();
  }

  llvm::Error regionsCover() {
    const int last = s_.actions_size() - 1;
    const int64_t slotBytes = largestUnitWeightBytes(p_, /*streamedOnly=*/true), gradBytes = largestUnitWeightBytes(p_);
    for (int k = 0; k < K_; ++k)
      if (auto e = require(DeviceRegion::WEIGHT_SLOT, k, slotBytes, 0, last, "the largest streamed unit's weights")) return e;
    if (const int64_t copyBytes = s_.weight_copy_bytes(); copyBytes != 0) {
      // The runtime packs a unit's weights into the copy beside its slot and the products read them there.
      if (p_.compute() != "bf16")
        return violation("malformed plan", "bf16 weight copies in a plan whose compute is '" + p_.compute() + "'");
      if (copyBytes < weightCopyBytes(slotBytes))
        return violation("region size", "bf16 weight copies of " + llvm::Twine(copyBytes) + " bytes cannot hold weight slots of " +
                                            llvm::Twine(slotBytes));
      for (int k = 0; k < K_; ++k)
        if (auto e = require(DeviceRegion::WEIGHT_COPY, k, copyBytes, 0, last, "the bf16 copy of weight slot " + std::to_string(k)))
          return e;
    }
    if (const int64_t cache = s_.pack_cache_bytes(); cache != 0) {
      // Part of the WORKSPACE region (its size below counts it): runtime/plan/PackCache.h.
      if (p_.compute() != "bf16")
        return violation("malformed plan", "a bf16 pack cache in a plan whose compute is '" + p_.compute() + "'");
      if (cache < 0 || cache % kAlignment != 0 || cache > s_.device_bytes())
        return violation("malformed plan", "a bf16 pack cache of " + llvm::Twine(cache) +
                                               " bytes (a multiple of 256 within the plan's device bytes)");
    }
    if (s_.grad_slot_bytes() < gradBytes)
      return violation("region size", "grad slots of " + llvm::Twine(s_.grad_slot_bytes()) + " bytes cannot hold the largest unit's gradients (" +
                                          llvm::Twine(gradBytes) + ")");
    for (int g = 0; g < G_; ++g)
      if (auto e = require(DeviceRegion::GRAD_SLOT, g, gradSlotBytes(s_, g), 0, last,
                           g < G_ - s_.small_grad_slots() ? "the largest unit's gradients" : "a small grad slot"))
        return e;
    if (s_.pinned_staging_bytes() < stagingOffset(s_, G_))
      return violation("region size", "pinned staging of " + llvm::Twine(s_.pinned_staging_bytes()) + " bytes cannot hold its " +
                                          llvm::Twine(G_) + " slots (" + llvm::Twine(stagingOffset(s_, G_)) + " bytes)");
    for (int a = 0; a < p_.activations_size(); ++a) {
      const Activation &act = p_.activations(a);
      const int64_t bytes = typeBytes(act.type());
      const int pu = producer_[size_t(a)];
      for (int mb = 0; mb < M_; ++mb) {
        if (pu < 0) {
          if (!users_[size_t(a)].empty())
            if (auto e = require(DeviceRegion::DATA, a, bytes, 0, last, "data " + activationName(a), mb)) return e;
          continue;
        }
        int readEnd = fwdAt_[at(pu, mb)];
        if (const Offloaded *o = offloadedOf(a, mb)) { // out after the forward, back before the backward
          int backEnd = o->load;
          for (auto [c, pos] : users_[size_t(a)]) {
            readEnd = std::max(readEnd, fwdAt_[at(c, mb)]);
            backEnd = std::max(backEnd, bwdAt_[at(c, mb)]);
          }
          if (auto e = require(DeviceRegion::CHECKPOINT, a, bytes, fwdAt_[at(pu, mb)], std::max({readEnd, o->save, o->freed}),
                               "activation " + activationName(a) + " until its copy out is waited for", mb))
            return e;
          if (auto e = require(DeviceRegion::LOADED_CHECKPOINT, a, bytes, o->load, backEnd, "activation " + activationName(a) + " brought back", mb))
            return e;
        } else {
          for (auto [c, pos] : users_[size_t(a)]) readEnd = std::max(readEnd, bwdAt_[at(c, mb)]);
          if (act.kind() == Activation::LOSS) readEnd = last;
          if (auto e = require(DeviceRegion::CHECKPOINT, a, bytes, fwdAt_[at(pu, mb)], readEnd, "activation " + activationName(a), mb)) return e;
        }
        int gradFirst = bwdAt_[at(pu, mb)];
        for (auto [c, pos] : users_[size_t(a)])
          if (gradFlows(c, pos)) gradFirst = std::min(gradFirst, bwdAt_[at(c, mb)]);
        if (auto e = require(DeviceRegion::ACTIVATION_GRAD, a, bytes, gradFirst, bwdAt_[at(pu, mb)], "the gradient of " + activationName(a), mb))
          return e;
      }
    }
    for (int u = 0; u < N_; ++u) {
      if (!keepsActivations(p_, u)) continue;
      const Template &t = p_.templates(p_.units(u).template_id());
      if (auto e = keepProgramsAgree(t)) return e;
      for (int mb = 0; mb < M_; ++mb)
        if (auto e = require(DeviceRegion::SAVED, u, savedLayout(t).bytes, fwdAt_[at(u, mb)], bwdAt_[at(u, mb)],
                             "the saved activations of unit '" + p_.units(u).name() + "'", mb))
          return e;
    }
    for (int k = 0; k < K_ && moments_; ++k)
      if (auto e = require(DeviceRegion::MOMENT_SLOT, k, momentSlotBytes(p_), 0, last, "the AdamW moments of the largest unit stepped on the GPU")) return e;
    for (int u = 0; u < N_; ++u)
      if (p_.units(u).resident())
        if (auto e = require(DeviceRegion::RESIDENT, u, residentLayout(p_, u).bytes, 0, last,
                             "the weights and AdamW moments of resident unit '" + p_.units(u).name() + "'"))
          return e;
    if (auto e = require(DeviceRegion::ARENA, 0, largestArenaBytes(p_), 0, last, "the largest program arena")) return e;
    if (auto e = require(DeviceRegion::WORKSPACE, 0, workspaceBudgetBytes(p_), 0, last, "the kernels' workspace")) return e;
    if (auto e = require(DeviceRegion::CONSTANTS, 0, constantsLayout(p_).bytes, 0, last, "the templates' constants")) return e;
    return llvm::Error::success();
  }

  // backward_kept takes what the backward takes plus forward_keep's saved
  // values, with their types.
  llvm::Error keepProgramsAgree(const Template &t) {
    if (!hasKeepPrograms(t))
      return violation("malformed plan", "template '" + t.name() + "' has a unit that keeps its activations but no keep programs");
    const Program &f = t.forward_keep(), &b = t.backward_kept();
    const int saved = f.results_size() - t.num_activation_outputs();
    if (saved < 0 || b.arguments_size() != t.backward().arguments_size() + saved)
      return violation("malformed plan", "template '" + t.name() + "': backward_kept takes " + llvm::Twine(b.arguments_size()) +
                                             " arguments; the backward's " + llvm::Twine(t.backward().arguments_size()) +
                                             " and " + llvm::Twine(saved) + " saved values expected");
    auto typeOf = [](const Program &prog, int32_t v) -> std::string {
      return v >= 0 && v < prog.values_size() ? prog.values(v).type().SerializeAsString() : std::string();
    };
    for (int i = 0; i < saved; ++i) {
      int32_t fv = f.results(t.num_activation_outputs() + i), bv = b.arguments(t.backward().arguments_size() + i);
      if (typeOf(f, fv).empty() || typeOf(f, fv) != typeOf(b, bv))
        return violation("malformed plan", "template '" + t.name() + "': saved value " + llvm::Twine(i) +
                                               " has another type in backward_kept than forward_keep writes");
    }
    return llvm::Error::success();
  }

  llvm::Error regionsDisjoint() {
    const int n = s_.regions_size();
    for (int i = 0; i < n; ++i) {
      const DeviceRegion &r = s_.regions(i);
      if (r.offset() % kAlignment != 0 || !blockWithin(r.offset(), r.bytes(), s_.device_bytes()))
        return violation("region overlap", regionText(r) + " is not a 256-aligned block inside the device allocation of " + llvm::Twine(s_.device_bytes()) + " bytes");
      if (r.micro_batch() < 0 || r.micro_batch() >= (perMicroBatch(r.kind()) ? M_ : 1))
        return violation("malformed plan", regionText(r) + ": micro-batch " + llvm::Twine(r.micro_batch()) + " (the pass carries " + llvm::Twine(M_) +
                                               (perMicroBatch(r.kind()) ? ")" : "; this kind of region is one for the whole pass)"));
      if (r.first_action() < 0 || r.first_action() > r.last_action() || r.last_action() >= s_.actions_size())
        return violation("region lifetime", regionText(r) + " has no valid lifetime among " + llvm::Twine(s_.actions_size()) + " actions");
    }
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return s_.regions(a).offset() < s_.regions(b).offset(); });
    for (int i = 0; i < n; ++i) {
      const DeviceRegion &a = s_.regions(order[size_t(i)]);
      for (int j = i + 1; j < n && s_.regions(order[size_t(j)]).offset() < a.offset() + a.bytes(); ++j) {
        const DeviceRegion &b = s_.regions(order[size_t(j)]);
        if (bytesOverlap(a.offset(), a.bytes(), b.offset(), b.bytes()) &&
            lifetimesOverlap(a.first_action(), a.last_action(), b.first_action(), b.last_action()))
          return violation("region overlap", regionText(a) + " and " + regionText(b) + " are live at once and share bytes");
      }
    }
    return llvm::Error::success();
  }
};

} // namespace

llvm::Error checkOptimizer(const Optimizer &o) {
  auto bad = [](const char *field, double v, const char *want) {
    return violation("optimizer", llvm::Twine(field) + " is " + llvm::Twine(std::to_string(v)) + "; it must be " + want);
  };
  const std::pair<const char *, double> nonNegative[] = {
      {"lr", o.lr()}, {"min_lr", o.min_lr()}, {"weight_decay", o.weight_decay()}, {"clip", o.clip()}};
  for (auto [field, v] : nonNegative)
    if (!(std::isfinite(v) && v >= 0)) return bad(field, v, "a finite number >= 0");
  for (auto [field, v] : {std::pair<const char *, double>{"beta1", o.beta1()}, {"beta2", o.beta2()}})
    if (!(v >= 0 && v < 1)) return bad(field, v, "in [0, 1)");
  if (!(std::isfinite(o.eps()) && o.eps() > 0)) return bad("eps", o.eps(), "a finite number > 0");
  if (o.warmup() < 0) return bad("warmup", double(o.warmup()), ">= 0");
  if (o.grad_accum() < 0) return bad("grad_accum", double(o.grad_accum()), ">= 0");
  if (!o.schedule().empty() && o.schedule() != "constant" && o.schedule() != "cosine")
    return violation("optimizer", "schedule is '" + o.schedule() + "'; it must be 'constant' or 'cosine'");
  return llvm::Error::success();
}

llvm::Error checkPlan(const Plan &p) {
  if (auto e = checkOptimizer(p.optimizer())) return e;
  for (const Template &t : p.templates()) {
    std::vector<const Program *> programs = templatePrograms(t);
    for (size_t i = 0; i < programs.size(); ++i) {
      const Program &prog = *programs[i];
      const std::string what = "template '" + t.name() + "' " + programRoleName(int(i));
      // Before the arena: the stash rule decides which lifetimes end early.
      if (std::string why = stashedOperandsProblem(prog, p.compute()); !why.empty())
        return violation("attention stash", what + ": " + why);
      if (!p.has_schedule() && prog.arena_offsets_size() == 0) continue;
      if (auto e = checkArena(prog, what)) return e;
    }
  }
  // Weights streamed as bf16: only where products alone read them (another
  // reader would silently see rounded weights) and the plan can stream them.
  for (int i = 0; i < p.parameters_size(); ++i)
    if (p.parameters(i).streams_bf16())
      if (std::string why = whyNotBf16Stream(p, i); !why.empty())
        return violation("bf16 weight stream", "parameter '" + p.parameters(i).name() + "' streams as bf16, but " + why);
  if (!p.has_schedule()) return llvm::Error::success();
  return ScheduleChecker(p).run();
}

} // namespace megac::plan
