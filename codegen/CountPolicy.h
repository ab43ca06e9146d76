#pragma once
// What the resident-unit and GPU-AdamW policies share: a flag that is a
// count or "auto", and auto's choice of the count by the cost model.
#include "codegen/StreamSchedule.h"

#include "llvm/ADT/STLFunctionalExtras.h"

namespace megac::codegen {

// "auto" -> -1, else a count >= 0; the error names `flag` ("--resident-units").
llvm::Expected<int> parseCountOrAuto(llvm::StringRef flag, llvm::StringRef s);

// The fewest count whose predicted step (byCount[count], one a count from 0)
// is within 0.5% of the fastest; 0 where there is none.
int fewestWithinHalfPercent(const std::vector<double> &byCount);

// Auto: for each count 0..most, setCount(count) and the schedule built, while
// the plan stays within 97% of the GPU budget; the fewest count whose step
// the cost model predicts within 0.5% of the fastest of them (0 where even
// none fits). Leaves the plan at the last count tried.
llvm::Expected<int> fewestNearFastest(plan::Plan &p, const ScheduleOptions &o, int most,
                                      llvm::function_ref<void(int)> setCount);

} // namespace megac::codegen
