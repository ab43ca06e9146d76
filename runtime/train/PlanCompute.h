#pragma once
// The CPU backend's matrix products round their operands as the plan's
// compute mode does on the GPU while a PlanComputeScope lives (emulation on),
// else compute in fp32.
#include "runtime/cpu/Gemm.h"
#include "runtime/plan/PlanIO.h"

namespace megac::runtime {

class PlanComputeScope {
public:
  PlanComputeScope(const plan::Plan &p, bool emulate) : saved_(cpu::sgemmOperandRounding()) {
    cpu::OperandRounding r = cpu::OperandRounding::None;
    if (emulate && p.compute() == "bf16") r = cpu::OperandRounding::Bf16;
    if (emulate && p.compute() == "tf32") r = cpu::OperandRounding::Tf32;
    cpu::setSgemmOperandRounding(r);
  }
  ~PlanComputeScope() { cpu::setSgemmOperandRounding(saved_); }
  PlanComputeScope(const PlanComputeScope &) = delete;
  PlanComputeScope &operator=(const PlanComputeScope &) = delete;

private:
  cpu::OperandRounding saved_;
};

} // namespace megac::runtime
