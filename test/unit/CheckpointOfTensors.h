#pragma once
// A plan and host state holding given tensors as a trainer's would: each
// parameter at its host offset, with gaps of filler between them (offsets
// must be honored, not assumed packed), for tests that write checkpoints
// through the trainer's own writer.
#include "runtime/core/Safetensors.h"
#include "runtime/train/Trainer.h"

#include <cstring>
#include <string>
#include <vector>

namespace megac::testing {

struct PlanAndState {
  plan::Plan plan;
  runtime::HostState state;
};

// `params` from host offset `first`, `gap` floats of `filler` after each;
// AdamW's moments zero.
inline PlanAndState planAndStateOf(const std::vector<NamedTensor> &params, const std::string &modelPath, int64_t first,
                                   int64_t gap, float filler) {
  PlanAndState r;
  r.plan.set_model_path(modelPath);
  int64_t offset = first;
  for (const NamedTensor &p : params) {
    auto *pp = r.plan.add_parameters();
    pp->set_name(p.name);
    for (int64_t d : p.tensor.shape()) pp->mutable_type()->add_shape(d);
    pp->set_host_offset(offset);
    pp->set_numel(p.tensor.numel());
    r.state.params.resize(size_t(offset + p.tensor.numel() + gap), filler);
    std::memcpy(r.state.params.data() + offset, p.tensor.raw(), p.tensor.nbytes());
    offset += p.tensor.numel() + gap;
  }
  r.state.m.assign(r.state.params.size(), 0.0f);
  r.state.v.assign(r.state.params.size(), 0.0f);
  return r;
}

} // namespace megac::testing
