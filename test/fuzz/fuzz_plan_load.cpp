// Plan file bytes -> plan::readPlan (magic, format version, the plan checker
// where the plan has a schedule), then what `megac run` does to a loaded plan
// before any step: the checker on every plan, and each template's programs
// prepared for the CPU runtime (constants and attributes converted, value ids
// checked). Nothing is allocated for the plan's host state (its size is the
// plan's to claim: issue 20's host-memory check, not a parser's).
#include "FuzzUtil.h"
#include "runtime/ProgramRunner.h"
#include "runtime/plan/PlanChecker.h"
#include "ProtoMutator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace megac;
  std::string path = fuzz::writeScratch("model.plan", data, size);
  auto p = plan::readPlan(path);
  if (!p) {
    fuzz::discard(p);
    return 0;
  }
  fuzz::discard(plan::checkPlan(*p));
  for (const plan::Template &t : p->templates()) {
    std::vector<const plan::Program *> progs = {&t.forward(), &t.backward()};
    if (t.has_forward_keep()) progs.push_back(&t.forward_keep());
    if (t.has_backward_kept()) progs.push_back(&t.backward_kept());
    for (const plan::Program *prog : progs) {
      auto pp = runtime::PreparedProgram::prepare(*prog, t.name());
      fuzz::discard(pp);
    }
  }
  return 0;
}

// Half the mutations change one field of the parsed plan (ProtoMutator.h).
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize, unsigned seed) {
  return megac::fuzz::mutateProto<megac::plan::Plan>(data, size, maxSize, seed, "MEGACPLN");
}
