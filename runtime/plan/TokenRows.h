#pragma once
// Token-indexed tables: a parameter that only a Gather of the model's token
// input reads (an untied embedding). Its gradient is zero in every row that
// no token of the step reads, and AdamW with a zero gradient does not need
// the gradient: so the host steps those rows before the backward, as soon
// as the step's PREFETCH of the unit has read the masters
// (StreamAction.UPDATE_UNREAD_ROWS), and the unit's UPDATE steps only the
// rows the tokens read. The embedding's gradients are the backward's last,
// and the next step's first PREFETCH waits for its update: what is left of
// that update after the backward is the rows the tokens read (at most one a
// token: 16,384 of a 128,256-row table at 8 x 2048).
#include "runtime/plan/PlanIO.h"

#include <cstdint>
#include <vector>

namespace megac::plan {

// Whether every op that reads parameter `param`, in every program of the one
// unit that has it, is a Gather along axis 0 of it whose indices are the
// unit's DATA_TOKENS activation input. False for a parameter of several
// units (tied), one of rank 0, or one no op reads.
bool readOnlyByTokenGather(const Plan &plan, int32_t param);

// The parameters of unit `unit` whose rows no token reads step early in
// this plan: token-indexed (above), of a unit that streams and steps on the
// host, in a plan without --clip (whose AdamW waits for the global norm).
std::vector<int32_t> unreadRowsParameters(const Plan &plan, int unit);

// Per unit: whether the plan's schedule steps its tables' unread rows early
// (it has an UPDATE_UNREAD_ROWS action of the unit); all false without a schedule.
std::vector<bool> unitsSteppingUnreadRowsEarly(const Plan &plan);

// Rows of a parameter (its first dimension) and the elements of one.
inline int64_t parameterRows(const Parameter &p) { return p.type().shape_size() > 0 ? p.type().shape(0) : 1; }
inline int64_t parameterRowElements(const Parameter &p) {
  const int64_t rows = parameterRows(p);
  return rows > 0 ? p.numel() / rows : 0;
}

// The cost model's share of a token-indexed parameter's rows that a step's
// tokens read: the expected share for tokens drawn uniformly, 1 - (1 - 1/rows)^tokens,
// which no distribution of the tokens exceeds in expectation (text, whose
// tokens repeat, reads fewer).
double readRowsShare(const Plan &plan, int32_t param);

// The "u<unit>.fetched" event: recorded by the unit's PREFETCH that an
// UPDATE_UNREAD_ROWS waits for.
std::string unitFetchedEventName(int unit);

} // namespace megac::plan
