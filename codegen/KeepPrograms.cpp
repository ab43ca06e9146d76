#include "codegen/KeepPrograms.h"

#include "codegen/BuildPlan.h"
#include "runtime/plan/ArenaRules.h"

#include <set>

namespace megac::codegen {

using namespace ir;

llvm::Error addKeepPrograms(const UnitPrograms &u, plan::Template &t) {
  Graph &bg = *u.backward;
  auto isRecomputed = [&](ValueId v) {
    if (v == kNoValue || bg.value(v).kind != ValueKind::Result) return false;
    int32_t p = bg.value(v).producer;
    return p >= 0 && size_t(p) < u.numForwardOps;
  };
  std::set<ValueId> needed;
  for (size_t i = u.numForwardOps; i < bg.ops.size(); ++i)
    if (!bg.ops[i].dead)
      for (ValueId in : bg.ops[i].inputs)
        if (isRecomputed(in)) needed.insert(in);
  for (ValueId r : u.backwardResults)
    if (isRecomputed(r)) needed.insert(r);
  if (needed.empty()) return llvm::Error::success();

  // Views stay (they cost nothing); their sources are needed instead.
  std::set<int32_t> keptOps;
  std::set<ValueId> saved;
  std::vector<ValueId> work(needed.begin(), needed.end());
  std::set<ValueId> seen(needed.begin(), needed.end());
  while (!work.empty()) {
    ValueId v = work.back();
    work.pop_back();
    int32_t p = bg.value(v).producer;
    const Op &op = bg.ops[size_t(p)];
    if (!plan::isViewOp(op.type)) { // the ops whose result may share its input's bytes
      saved.insert(v);
      continue;
    }
    keptOps.insert(p);
    for (ValueId in : op.inputs)
      if (isRecomputed(in) && seen.insert(in).second) work.push_back(in);
  }

  if (saved.empty()) return llvm::Error::success(); // views of arguments only: nothing to keep
  std::vector<ValueId> savedList(saved.begin(), saved.end());
  std::vector<ValueId> fwdResults = u.forwardResults;
  fwdResults.insert(fwdResults.end(), savedList.begin(), savedList.end());
  auto fwd = toProgram(*u.forward, u.forwardArgs, fwdResults);
  if (!fwd) return fwd.takeError();

  Graph kept = bg;
  for (size_t i = 0; i < u.numForwardOps; ++i)
    if (!keptOps.count(int32_t(i))) kept.ops[i].dead = true;
  std::vector<ValueId> args = u.backwardArgs;
  args.insert(args.end(), savedList.begin(), savedList.end());
  auto bwd = toProgram(kept, args, u.backwardResults);
  if (!bwd) return bwd.takeError();
  *t.mutable_forward_keep() = std::move(*fwd);
  *t.mutable_backward_kept() = std::move(*bwd);
  return llvm::Error::success();
}

} // namespace megac::codegen
