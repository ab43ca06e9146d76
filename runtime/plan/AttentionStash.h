#pragma once
// Which attention gradients read their forward's Q, K and V from the
// attention stash, so that those need not live until them.
//
// A unit's backward program recomputes its forward, then runs its gradient:
// the fused attention's forward leaves bf16 Q, K, V, Y and the softmax stats
// in the stash (runtime/plan/FusedAttention.h) and the gradient reads them
// there, not its fp32 operands. Where that is certain the gradient carries
// `stashed_operands = 1`: it reads its inputs 1-3 for their shapes only
// (readsBytes in ArenaRules.h), so their lifetimes end at the forward. At 7B
// and 524,288 tokens that takes 24 GiB (three fp32 [S, 4096]) off the arena.
//
// The rule, which codegen marks programs by, the plan checker checks and both
// runtimes follow: in a bf16 plan, a megac.AttentionGrad of plain operands
// that runs fused (plan::runsFused), whose nearest earlier Attention or
// megac.AttentionGrad in its program is an Attention of the same Q, K and V,
// also fused. The CUDA runtime then finds that forward's residue in the stash
// (nothing between overwrites it) and errors if it does not; the CPU runner
// copies Q, K and V when the forward has run and the gradient reads the copy.
#include "runtime/plan/PlanIO.h"

#include <string>

namespace megac::plan {

// Index in `p` of the Attention op `grad` may take its operands from: the
// nearest earlier Attention or megac.AttentionGrad, where that is an
// Attention of the same Q, K and V; else -1 with why not in *why. The rule's
// structure, without its bf16 and fused conditions (the CPU runner's).
int stashSourceOf(const Program &p, int grad, std::string *why = nullptr);

// Index in `p` of the forward Attention whose operands the stashed gradient
// at op `grad` reads, or -1 with why not in *why: the rule above.
int stashedGradForward(const Program &p, int grad, const std::string &compute, std::string *why = nullptr);

// Marks every gradient of `p` that the rule allows; returns how many.
int markStashedAttentionOperands(Program &p, const std::string &compute);

// The checker's: empty where every marked gradient of `p` follows the rule,
// else what breaks it.
std::string stashedOperandsProblem(const Program &p, const std::string &compute);

} // namespace megac::plan
