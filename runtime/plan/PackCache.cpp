#include "runtime/plan/PackCache.h"

#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/UnitPrograms.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace megac::plan {

static bool isProduct(const std::string &type) { return type == "MatMul" || type == "Gemm"; }

PackCacheUse packCacheUse(const Program &p) {
  const int n = p.values_size();
  auto valid = [&](int32_t id) { return id >= 0 && id < n; };
  const std::vector<int32_t> root = viewRoots(p);
  // An operand: its value's root and its shape.
  using Key = std::pair<int32_t, std::string>;
  auto keyOf = [&](int32_t id) { return Key{root[size_t(id)], p.values(id).type().SerializeAsString()}; };
  std::map<Key, int> lastRead; // the last product reading each operand
  for (int k = 0; k < p.ops_size(); ++k) {
    const Program::Op &op = p.ops(k);
    if (!isProduct(op.type())) continue;
    for (int i = 0; i < 2 && i < op.inputs_size(); ++i)
      if (valid(op.inputs(i))) lastRead[keyOf(op.inputs(i))] = k;
  }
  PackCacheUse use;
  use.stores.assign(size_t(p.ops_size()), {false, false});
  std::map<Key, bool> stored;
  for (int k = 0; k < p.ops_size(); ++k) {
    const Program::Op &op = p.ops(k);
    if (!isProduct(op.type())) continue;
    for (int i = 0; i < 2 && i < op.inputs_size(); ++i) {
      if (!valid(op.inputs(i))) continue;
      const Key key = keyOf(op.inputs(i));
      if (lastRead[key] <= k || stored[key]) continue;
      stored[key] = true;
      use.stores[size_t(k)][size_t(i)] = true;
      int64_t elems = 1;
      for (int64_t d : p.values(op.inputs(i)).type().shape()) elems *= d;
      use.bytes += alignUp(2 * elems);
    }
  }
  return use;
}

int64_t packCacheNeedBytes(const Plan &p) {
  if (p.compute() != "bf16") return 0;
  int64_t most = 0;
  for (const Template &t : p.templates())
    for (const Program *prog : templatePrograms(t)) most = std::max(most, packCacheUse(*prog).bytes);
  return most;
}

} // namespace megac::plan
