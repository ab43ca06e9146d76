#pragma once
// How stream units are recorded in the IR: each op carries the attribute
// megac.unit naming its unit; units run in order of their first op.
#include "ir/Graph.h"

namespace megac::passes {

inline constexpr const char *kUnitAttr = "megac.unit";

struct UnitInfo {
  std::string name;
  std::vector<int32_t> ops;              // in graph order
  std::vector<ir::ValueId> activationIn; // dynamic values from outside, by first use
  std::vector<ir::ValueId> params;       // by first use
  std::vector<ir::ValueId> activationOut;
};

// The units of a partitioned graph, in execution order. An error if some
// live op has no unit or a unit uses a value of a later unit.
llvm::Expected<std::vector<UnitInfo>> collectUnits(const ir::Graph &g);

} // namespace megac::passes
