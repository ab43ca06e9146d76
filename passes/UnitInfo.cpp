#include "passes/UnitInfo.h"

#include <map>
#include <set>

namespace megac::passes {

using namespace ir;

llvm::Expected<std::vector<UnitInfo>> collectUnits(const Graph &g) {
  std::vector<UnitInfo> units;
  std::map<std::string, size_t> index;
  std::vector<int32_t> unitOfValue(g.values.size(), -1);
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op &op = g.ops[i];
    if (op.dead) continue;
    const Attr *a = op.attrs.get(kUnitAttr);
    if (!a) return opError(g, op, "op belongs to no unit (run partition-units)");
    auto it = index.find(a->s);
    if (it == index.end()) {
      it = index.emplace(a->s, units.size()).first;
      units.push_back({a->s, {}, {}, {}, {}});
    } else if (it->second + 1 != units.size()) {
      // Units are contiguous: ops of an earlier unit may not follow a later one
      // unless they only depend on parameters (those are fine anywhere).
      bool paramOnly = true;
      for (ValueId in : op.inputs)
        if (in != kNoValue && g.value(in).kind != ValueKind::Param && g.value(in).kind != ValueKind::Const &&
            unitOfValue[size_t(in)] != int32_t(it->second))
          paramOnly = false;
      if (!paramOnly) return opError(g, op, "unit '" + a->s + "' is not contiguous");
    }
    units[it->second].ops.push_back(int32_t(i));
    for (ValueId o : op.outputs)
      if (o != kNoValue) unitOfValue[size_t(o)] = int32_t(it->second);
  }
  std::set<ValueId> graphOutputs(g.outputs.begin(), g.outputs.end());
  for (size_t u = 0; u < units.size(); ++u) {
    UnitInfo &unit = units[u];
    std::set<ValueId> seenIn, seenParam;
    for (int32_t i : unit.ops)
      for (ValueId in : g.ops[size_t(i)].inputs) {
        if (in == kNoValue) continue;
        const Value &v = g.value(in);
        if (v.kind == ValueKind::Param) {
          if (seenParam.insert(in).second) unit.params.push_back(in);
        } else if (v.kind == ValueKind::Input || (v.kind == ValueKind::Result && unitOfValue[size_t(in)] != int32_t(u))) {
          if (v.kind == ValueKind::Result && unitOfValue[size_t(in)] > int32_t(u))
            return opError(g, g.ops[size_t(i)], "uses '" + v.name + "' from a later unit");
          if (seenIn.insert(in).second) unit.activationIn.push_back(in);
        }
      }
  }
  // Outputs: values used by another unit, or graph outputs.
  std::vector<std::set<ValueId>> outs(units.size());
  for (size_t u = 0; u < units.size(); ++u)
    for (ValueId in : units[u].activationIn)
      if (g.value(in).kind == ValueKind::Result) outs[size_t(unitOfValue[size_t(in)])].insert(in);
  for (ValueId o : g.outputs)
    if (unitOfValue[size_t(o)] >= 0) outs[size_t(unitOfValue[size_t(o)])].insert(o);
  for (size_t u = 0; u < units.size(); ++u)
    for (int32_t i : units[u].ops)
      for (ValueId o : g.ops[size_t(i)].outputs)
        if (o != kNoValue && outs[u].count(o)) units[u].activationOut.push_back(o);
  return units;
}

} // namespace megac::passes
