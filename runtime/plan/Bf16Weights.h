#pragma once
// Weights streamed as bf16 (--bf16-weight-stream; plan.proto's
// Parameter.streams_bf16). A bf16 plan's matrix products read their weights
// as bf16 anyway (its weight slots' bf16 copies); the fp32 masters are for
// the optimizer alone. So a parameter read only by products can cross PCIe
// as bf16, half the bytes of the H2D lane: the host's AdamW writes its bf16
// rounding beside the master, and a PREFETCH copies that into the slot's
// bf16 copy and unpacks it into the fp32 slot. The products then read the
// same bf16 values as without (bit for bit); any other reader would read
// rounded weights, which is why only products' parameters qualify.
#include "runtime/plan/PlanIO.h"

#include <cstdint>
#include <string>
#include <vector>

namespace megac::plan {

// Whether every op that reads parameter `param`, in every program of every
// unit that has it, reads it as a matrix operand of a product that the GPU
// runs in bf16 from the weight slot's copy: MatMul's A or B, Gemm's A or B
// (not its C), the fused loss's W. False for a parameter no op reads.
bool readOnlyByProducts(const Plan &plan, int32_t param);

// Why parameter `param` may not stream as bf16 in this plan ("" where it
// may): the plan computes in bf16 with weight copies, the parameter is read
// only by products, and every unit that has it streams and steps on the host
// (a resident or GPU-stepped unit's weights come to the GPU in fp32).
std::string whyNotBf16Stream(const Plan &plan, int32_t param);

// The host's bf16 weights: per parameter its element offset in one array,
// -1 where it does not stream as bf16; each starts 256 bytes aligned.
struct Bf16WeightLayout {
  std::vector<int64_t> offsets;
  int64_t elements = 0;
  bool empty() const { return elements == 0; }
};
Bf16WeightLayout bf16WeightLayout(const Plan &plan);

// Elements of unit `unit`'s parameters that stream as bf16.
int64_t unitBf16Elements(const Plan &plan, int unit);
// The bytes a PREFETCH of unit `unit` copies: its slot layout's, less 2 a
// parameter element that streams as bf16.
int64_t prefetchBytes(const Plan &plan, int unit);

} // namespace megac::plan
