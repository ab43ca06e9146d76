#include "runtime/plan/PackCache.h"

#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/UnitPrograms.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace megac::plan {

static bool isProduct(const std::string &type) { return type == "MatMul" || type == "Gemm"; }

PackCacheUse packCacheUse(const Program &p) {
  const int n = p.values_size();
  const std::vector<int32_t> root = viewRoots(p);
  PackCacheUse use;
  use.operand.assign(size_t(p.ops_size()), {-1, -1});
  use.stores.assign(size_t(p.ops_size()), {false, false});
  // An operand: its value's root and its shape.
  std::map<std::pair<int32_t, std::string>, int32_t> ids;
  std::vector<int> lastRead; // per operand, the last product reading it
  for (int k = 0; k < p.ops_size(); ++k) {
    const Program::Op &op = p.ops(k);
    if (!isProduct(op.type())) continue;
    for (int i = 0; i < 2 && i < op.inputs_size(); ++i) {
      const int32_t v = op.inputs(i);
      if (v < 0 || v >= n) continue;
      auto [it, added] = ids.try_emplace({root[size_t(v)], p.values(v).type().SerializeAsString()},
                                         int32_t(use.operandBytes.size()));
      if (added) {
        int64_t elems = 1;
        for (int64_t d : p.values(v).type().shape()) elems *= d;
        use.operandBytes.push_back(alignUp(2 * elems));
        lastRead.push_back(k);
      }
      use.operand[size_t(k)][size_t(i)] = it->second;
      lastRead[size_t(it->second)] = k;
    }
  }
  std::vector<bool> stored(use.operandBytes.size(), false);
  for (int k = 0; k < p.ops_size(); ++k)
    for (int i = 0; i < 2; ++i) {
      const int32_t id = use.operand[size_t(k)][size_t(i)];
      if (id < 0 || lastRead[size_t(id)] <= k || stored[size_t(id)]) continue;
      stored[size_t(id)] = true;
      use.stores[size_t(k)][size_t(i)] = true;
      use.bytes += use.operandBytes[size_t(id)];
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
