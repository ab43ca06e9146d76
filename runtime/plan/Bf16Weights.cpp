#include "runtime/plan/Bf16Weights.h"

#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/StreamLayout.h"
#include "runtime/plan/UnitPrograms.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>

namespace megac::plan {

// The input positions at which an op reads a matrix operand from a weight
// slot's bf16 copy on the GPU (ltMatmul's copyOf, the fused loss's packW).
static bool readsAsBf16Operand(llvm::StringRef type, int position) {
  if (type == "MatMul" || type == "Gemm") return position == 0 || position == 1;
  if (type == "megac.LinearCrossEntropy") return position == 1;
  if (type == "megac.LinearCrossEntropyGrad") return position == 2;
  return false;
}

bool readOnlyByProducts(const Plan &plan, int32_t param) {
  bool read = false;
  const bool onlyProducts = forEachParameterRead(plan, param, [&](const Program &, const Program::Op &op, int i) {
    read = true;
    return readsAsBf16Operand(op.type(), i);
  });
  return onlyProducts && read;
}

std::string whyNotBf16Stream(const Plan &plan, int32_t param) {
  if (param < 0 || param >= plan.parameters_size()) return "it does not exist";
  if (plan.compute() != "bf16") return "the plan computes in " + plan.compute() + ", not bf16";
  if (!plan.has_schedule() || plan.schedule().weight_copy_bytes() <= 0) return "the plan has no bf16 weight copies";
  const Parameter &p = plan.parameters(param);
  if (p.units_size() == 0) return "no unit has it";
  for (int32_t u : p.units()) {
    if (u < 0 || u >= plan.units_size()) return "a unit that has it does not exist";
    if (plan.units(u).resident()) return "unit '" + plan.units(u).name() + "' is resident";
    if (!steppedOnHost(plan.units(u))) return "unit '" + plan.units(u).name() + "' steps on the GPU";
  }
  if (!readOnlyByProducts(plan, param)) return "an op that is not a matrix product reads it";
  return "";
}

Bf16WeightLayout bf16WeightLayout(const Plan &plan) {
  Bf16WeightLayout l;
  l.offsets.assign(size_t(plan.parameters_size()), -1);
  for (int i = 0; i < plan.parameters_size(); ++i) {
    const Parameter &p = plan.parameters(i);
    if (!p.streams_bf16()) continue;
    l.offsets[size_t(i)] = l.elements;
    l.elements += alignUp(std::max<int64_t>(p.numel(), 0), 128);
  }
  return l;
}

int64_t unitBf16Elements(const Plan &plan, int unit) {
  int64_t n = 0;
  if (unit < 0 || unit >= plan.units_size()) return 0;
  for (int32_t id : plan.units(unit).parameters())
    if (id >= 0 && id < plan.parameters_size() && plan.parameters(id).streams_bf16()) n += plan.parameters(id).numel();
  return n;
}

int64_t prefetchBytes(const Plan &plan, int unit) {
  return unitWeightLayout(plan, unit).bytes - 2 * unitBf16Elements(plan, unit);
}

} // namespace megac::plan
