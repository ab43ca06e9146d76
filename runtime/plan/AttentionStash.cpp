#include "runtime/plan/AttentionStash.h"

#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/FusedAttention.h"
#include "runtime/plan/StreamLayout.h"

namespace megac::plan {

namespace {

bool isAttention(const Program::Op &op) { return op.type() == "Attention" || op.type() == "megac.AttentionGrad"; }

bool runsFusedIn(const Program &p, const Program::Op &op, const std::string &compute) {
  if (compute != "bf16") return false;
  auto d = attentionOpDims(p, op);
  if (!d) {
    llvm::consumeError(d.takeError());
    return false;
  }
  return runsFused(*d, attentionOperandsPlain(p, op));
}

} // namespace

int stashSourceOf(const Program &p, int grad, std::string *why) {
  auto no = [&](const std::string &m) {
    if (why) *why = m;
    return -1;
  };
  if (grad < 0 || grad >= p.ops_size()) return no("no such op");
  const Program::Op &g = p.ops(grad);
  if (g.type() != "megac.AttentionGrad" || g.inputs_size() < 4) return no("it is no megac.AttentionGrad");
  int f = grad - 1;
  while (f >= 0 && !isAttention(p.ops(f))) --f;
  if (f < 0) return no("no Attention runs before it in its program");
  const Program::Op &fwd = p.ops(f);
  if (fwd.type() != "Attention")
    return no("the attention op before it, op " + std::to_string(f) + ", is another gradient");
  for (int i = 0; i < 3; ++i)
    if (g.inputs(i + 1) < 0 || fwd.inputs_size() <= i || fwd.inputs(i) != g.inputs(i + 1))
      return no("the Attention before it, op " + std::to_string(f) + ", has other operands");
  return f;
}

int stashedGradForward(const Program &p, int grad, const std::string &compute, std::string *why) {
  const int f = stashSourceOf(p, grad, why);
  if (f < 0) return -1;
  auto no = [&](const std::string &m) {
    if (why) *why = m;
    return -1;
  };
  if (!runsFusedIn(p, p.ops(grad), compute))
    return no("it does not run fused (a bf16 plan, plain operands, sizes cuDNN takes)");
  if (!runsFusedIn(p, p.ops(f), compute)) return no("the Attention before it, op " + std::to_string(f) + ", does not run fused");
  return f;
}

int markStashedAttentionOperands(Program &p, const std::string &compute) {
  int marked = 0;
  for (int k = 0; k < p.ops_size(); ++k) {
    if (hasStashedOperands(p.ops(k)) || stashedGradForward(p, k, compute) < 0) continue;
    Attribute *a = p.mutable_ops(k)->add_attributes();
    a->set_name(kStashedOperandsAttr);
    a->set_i(1);
    ++marked;
  }
  return marked;
}

std::string stashedOperandsProblem(const Program &p, const std::string &compute) {
  for (int k = 0; k < p.ops_size(); ++k) {
    if (!hasStashedOperands(p.ops(k))) continue;
    std::string why;
    if (stashedGradForward(p, k, compute, &why) < 0)
      return "op " + std::to_string(k) + " ('" + p.ops(k).name() + "') reads its Q, K and V from the attention stash, but " + why;
  }
  return "";
}

} // namespace megac::plan
