#pragma once
// Reading and writing plan files (runtime/plan/plan.proto).
#include "plan.pb.h"

#include "runtime/core/Attrs.h"
#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"

namespace megac::plan {

// Bumped whenever the format changes incompatibly.
inline constexpr uint32_t kFormatVersion = 3; // 2: device memory plan, stream schedule, unit-blocked host layout; 3: tied parameters marked
inline constexpr const char *kMegacVersion = "0.1";

llvm::Error writePlan(const Plan &p, const std::string &path);
// Refuses files that are not plans or were written by another format version.
llvm::Expected<Plan> readPlan(const std::string &path);

// Sets each parameter's weight-decay flag from the optimizer's no_decay
// regex (matched against the whole name; empty: every parameter decays).
llvm::Error applyNoDecay(Plan &p);

// Conversions between the plan's messages and runtime tensors/attributes.
void toProto(const megac::Tensor &t, Constant &c);
llvm::Expected<megac::Tensor> fromProto(const Constant &c);
void toProto(const megac::Attrs &a, google::protobuf::RepeatedPtrField<Attribute> &out);
llvm::Expected<megac::Attrs> fromProto(const google::protobuf::RepeatedPtrField<Attribute> &in);
TensorType typeProto(megac::DType dtype, const Shape &shape);

} // namespace megac::plan
