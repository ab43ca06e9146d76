#include "tools/inspect/ScheduleDump.h"

#include "codegen/MemoryPlan.h"
#include "runtime/plan/StreamLayout.h"
#include "runtime/plan/UnitPrograms.h"

namespace megac::plan {

static void printEvents(const StreamSchedule &s, const google::protobuf::RepeatedField<int32_t> &ids,
                        llvm::raw_ostream &os) {
  if (ids.empty()) os << " -";
  for (int32_t e : ids) os << " " << (e >= 0 && e < s.events_size() ? s.events(e) : "event" + std::to_string(e));
}

llvm::Error printSchedule(const Plan &p, llvm::raw_ostream &os) {
  if (!p.has_schedule())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "the plan has no streaming schedule");
  const StreamSchedule &s = p.schedule();
  auto unitName = [&](int u) { return u >= 0 && u < p.units_size() ? p.units(u).name() : "unit" + std::to_string(u); };
  os << "schedule: " << p.units_size() << " units, " << s.weight_slots() << " weight slots, " << s.grad_slots()
     << " grad slots (and as many pinned staging slots)"
     << (s.overlap_steps() ? "; steps overlap (the host's AdamW runs on beside the next step)" : "") << "\n";
  if (passMicroBatches(s) > 1)
    os << "micro-batches per pass: " << passMicroBatches(s) << " (each unit streams once a pass; mb<k>: which)\n";
  os << "slot bytes: weight " << s.weight_slot_bytes() << ", grad " << s.grad_slot_bytes();
  if (s.small_grad_slots() > 0)
    os << " (the last " << s.small_grad_slots() << ": " << s.small_grad_slot_bytes() << ", for the units whose gradients fit)";
  os << "; pinned staging " << s.pinned_staging_bytes() << "\n";
  if (s.pinned_checkpoint_bytes() > 0)
    os << "pinned checkpoint bytes: " << s.pinned_checkpoint_bytes() << " (the offloaded checkpoints, each at its copies' host offset)\n";
  os << "device bytes: " << s.device_bytes() << " (budget " << s.gpu_budget_bytes() << ")\n";
  os << "arenas (bytes; the sum of their buffers; the peak bytes live):\n";
  for (const Template &t : p.templates()) {
    std::vector<const Program *> programs = templatePrograms(t);
    for (size_t i = 0; i < programs.size(); ++i) {
      const Program &prog = *programs[i];
      os << "  " << t.name() << " " << programRoleName(int(i)) << ": " << prog.arena_bytes();
      if (auto ap = planArena(prog)) os << "; " << ap->sumBytes << "; " << ap->lowerBound << "\n";
      else os << "; invalid program: " << llvm::toString(ap.takeError()) << "\n";
    }
  }
  os << "events (" << s.events_size() << "):";
  for (const std::string &e : s.events()) os << " " << e;
  os << "\n";
  os << "regions (" << s.regions_size() << "):\n";
  for (const DeviceRegion &r : s.regions()) {
    os << "  " << regionKindName(r.kind()) << " " << r.index();
    bool isActivation = r.kind() == DeviceRegion::CHECKPOINT || r.kind() == DeviceRegion::ACTIVATION_GRAD ||
                        r.kind() == DeviceRegion::DATA || r.kind() == DeviceRegion::LOADED_CHECKPOINT;
    if (isActivation && r.index() >= 0 && r.index() < p.activations_size())
      os << " '" << p.activations(r.index()).name() << "'";
    if ((r.kind() == DeviceRegion::SAVED || r.kind() == DeviceRegion::RESIDENT) && r.index() >= 0 && r.index() < p.units_size())
      os << " '" << p.units(r.index()).name() << "'";
    if (passMicroBatches(s) > 1 && perMicroBatch(r.kind())) os << " mb" << r.micro_batch();
    os << ": offset " << r.offset() << ", " << r.bytes() << " bytes, actions " << r.first_action() << ".."
       << r.last_action() << "\n";
  }
  os << "actions (" << s.actions_size() << "):\n";
  for (int i = 0; i < s.actions_size(); ++i) {
    const StreamAction &a = s.actions(i);
    os << "  " << i << ": " << actionKindName(a.kind()) << " " << unitName(a.unit());
    if (isCheckpointCopy(a.kind()) && a.activation() >= 0 && a.activation() < p.activations_size())
      os << " '" << p.activations(a.activation()).name() << "'";
    if (passMicroBatches(s) > 1 && (a.kind() == StreamAction::FORWARD || a.kind() == StreamAction::BACKWARD || isCheckpointCopy(a.kind())))
      os << " mb" << a.micro_batch();
    os << " on " << streamName(a.stream());
    if ((a.kind() == StreamAction::FORWARD || a.kind() == StreamAction::BACKWARD) && keepsActivations(p, a.unit()))
      os << " (keeps activations)";
    const bool resident = a.unit() >= 0 && a.unit() < p.units_size() && p.units(a.unit()).resident();
    if (resident && a.kind() != StreamAction::UPDATE) os << " (resident)";
    if (a.weight_slot() >= 0) os << " w" << a.weight_slot();
    // An UPDATE on the GPU (resident, or adamw_on_gpu) reads the grad slot; the CPU's, the staging slot.
    const bool gpuUpdate = a.kind() == StreamAction::UPDATE && a.stream() == StreamAction::COMPUTE;
    if (a.grad_slot() >= 0 && (a.kind() != StreamAction::UPDATE || gpuUpdate)) os << " g" << a.grad_slot();
    if (a.grad_slot() >= 0 && a.kind() != StreamAction::BACKWARD && !gpuUpdate) os << " s" << a.grad_slot(); // staging
    if (a.kind() == StreamAction::FETCH_MOMENTS || a.kind() == StreamAction::WRITEBACK ||
        (gpuUpdate && a.weight_slot() >= 0))
      os << " m" << a.weight_slot(); // the moment slot beside the weight slot
    if (isCheckpointCopy(a.kind())) os << " host+" << a.host_offset();
    os << ", waits";
    printEvents(s, a.waits(), os);
    os << ", records";
    printEvents(s, a.records(), os);
    os << "\n";
  }
  return llvm::Error::success();
}

} // namespace megac::plan
