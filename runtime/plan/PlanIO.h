#pragma once
// Reading and writing plan files (runtime/plan/plan.proto).
#include "plan.pb.h"

#include "runtime/core/Attrs.h"
#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"

namespace megac::plan {

// Bumped whenever the format changes incompatibly.
// 2: device memory plan, stream schedule, unit-blocked host layout; 3: tied
// parameters marked; 4: a header with the payload's size and CRC-32; 5: the
// model's path relative to the plan, and the model's hash (Plan.model_hash);
// 6: streamed units whose AdamW runs on the GPU (Unit.adamw_on_gpu); 7: steps
// that overlap; 9: micro-batches carried through each unit in a pass (no 8:
// its header would start like a headerless plan); 10: checkpoint offload;
// 11: attention gradients that read their operands from the stash
// (runtime/plan/AttentionStash.h: a megac before it would read bytes the
// arena gave to others); 12: bf16 copies of the weight slots
// (StreamSchedule.weight_copy_bytes); 13: weights streamed as bf16
// (Parameter.streams_bf16); 14: several GPUs (Plan.gpus); 15: the rows of
// token-indexed tables that no token reads, stepped early
// (StreamAction.UPDATE_UNREAD_ROWS). readPlan reads formats 4 (an absolute
// model path, no hash) to 7 and 9 to 14 too.
inline constexpr uint32_t kFormatVersion = 15;
inline constexpr const char *kMegacVersion = "0.1";

// A plan file (format 4 on): the magic "MEGACPLN"; a 16-byte header, the
// format version (u32), the CRC-32 of the payload (u32) and the payload's
// size in bytes (u64), little-endian; then the payload, the serialized Plan.
// Formats 1-3 had no header: the magic, then the Plan.
llvm::Error writePlan(const Plan &p, const std::string &path);
// Refuses files that are not plans, were written by another format version,
// or whose payload does not match its checksum. writePlan stores the model's
// path relative to the plan file's directory; readPlan makes it absolute
// again from wherever the plan now is.
llvm::Expected<Plan> readPlan(const std::string &path);

// AdamW as `megac compile` sets it without flags: lr 1e-3, betas (0.9, 0.999),
// eps 1e-8, weight decay 0.01, a constant schedule, no clipping, one
// micro-batch a step. What a plan built through the API starts from
// (codegen::CodegenOptions), so that no caller gets beta2 = eps = 0 by
// leaving them out (an update of g / |g|, NaN where g is 0).
Optimizer defaultOptimizer();

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
