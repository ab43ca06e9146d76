#include "runtime/plan/HostBill.h"

#include "runtime/plan/Bf16Weights.h"
#include "runtime/plan/StreamLayout.h"

namespace megac::plan {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static llvm::Error checkIds(const Plan &p) {
  for (const Unit &u : p.units()) {
    auto bad = [&](const char *what, int64_t id) {
      return err("plan unit '" + u.name() + "' refers to " + what + " " + llvm::Twine(id) + ", which does not exist");
    };
    if (u.template_id() < 0 || u.template_id() >= p.templates_size()) return bad("template", u.template_id());
    for (int32_t a : u.activation_inputs())
      if (a < 0 || a >= p.activations_size()) return bad("activation", a);
    for (int32_t a : u.activation_outputs())
      if (a < 0 || a >= p.activations_size()) return bad("activation", a);
    for (int32_t q : u.parameters())
      if (q < 0 || q >= p.parameters_size()) return bad("parameter", q);
  }
  for (const StreamAction &a : p.schedule().actions())
    if (transferCopies(a.kind()) != 0 && (a.unit() < 0 || a.unit() >= p.units_size()))
      return err("schedule action refers to unit " + llvm::Twine(a.unit()) + ", which does not exist");
  return llvm::Error::success();
}

llvm::Expected<HostBill> hostBill(const Plan &p) {
  if (auto e = checkIds(p)) return std::move(e);
  // Counted from the parameter table (not total_parameters) so that a tied
  // weight used by several units counts once.
  int64_t parameters = 0;
  for (const Parameter &q : p.parameters()) parameters += q.numel();
  HostBill h;
  h.masterWeights = 4 * parameters;
  h.adamMoments = 8 * parameters;
  h.gradients = stepKeepsGradients(p) ? 4 * parameters : 0;
  h.pinnedStaging = p.schedule().pinned_staging_bytes();
  h.pinnedCheckpoints = p.schedule().pinned_checkpoint_bytes();
  h.bf16Weights = 2 * bf16WeightLayout(p).elements;
  return h;
}

} // namespace megac::plan
