#include "passes/autodiff/Autodiff.h"

#include "llvm/ADT/StringMap.h"

#include <mutex>

namespace megac::autodiff {

using namespace ir;

static llvm::StringMap<GradRule> &rules() {
  static llvm::StringMap<GradRule> r;
  return r;
}

void registerGradRule(llvm::StringRef opType, GradRule rule) { rules()[opType] = rule; }

GradRule lookupGradRule(llvm::StringRef opType) {
  static std::once_flag once;
  std::call_once(once, [] {
    registerElementwiseGrads();
    registerShapeGrads();
    registerReductionGrads();
    registerNNGrads();
    registerLossGrads();
    registerSwiGLUGrads();
  });
  auto it = rules().find(opType);
  return it == rules().end() ? nullptr : it->second;
}

GradContext::GradContext(Graph &g, int32_t opIndex, const std::vector<ValueId> &outGrads,
                         const std::vector<bool> &needs)
    : GradBuilder(g, "grad/" + g.ops[size_t(opIndex)].name), op_(g.ops[size_t(opIndex)]), outGrads_(outGrads),
      needs_(needs), inGrads_(op_.inputs.size(), kNoValue) {}

void GradContext::addGrad(size_t i, ValueId gv) {
  if (failed() || gv == kNoValue || !needsGrad(i)) return;
  if (type(gv).shape != type(input(i)).shape) {
    fail(opError(graph(), op_,
                 "autodiff: gradient of input " + llvm::Twine(i) + " has shape " + shapeToString(type(gv).shape) +
                     ", the input has " + shapeToString(type(input(i)).shape)));
    return;
  }
  if (type(gv).dtype != type(input(i)).dtype) {
    Attrs a;
    a.set("to", Attr::ofInt(int64_t(type(input(i)).dtype)));
    gv = op("Cast", {gv}, a);
  }
  inGrads_[i] = add(inGrads_[i], gv);
}

void GradContext::unsupported(const llvm::Twine &why) {
  fail(opError(graph(), op_, "autodiff: " + why));
}

llvm::Expected<GradResult> differentiate(Graph &g, const std::vector<ValueId> &outputs,
                                         const std::vector<ValueId> &seeds, const std::vector<ValueId> &wrt) {
  size_t numForwardOps = g.ops.size();
  // Values that depend on something in wrt.
  std::vector<bool> depends(g.values.size(), false);
  for (ValueId w : wrt) depends[size_t(w)] = true;
  for (size_t i = 0; i < numForwardOps; ++i) {
    const Op &op = g.ops[i];
    if (op.dead) continue;
    bool d = false;
    for (ValueId in : op.inputs) d |= in != kNoValue && depends[size_t(in)];
    for (ValueId o : op.outputs)
      if (o != kNoValue) depends[size_t(o)] = depends[size_t(o)] || (d && isFloatType(g.type(o).dtype));
  }
  std::vector<ValueId> grad(g.values.size(), kNoValue);
  for (size_t k = 0; k < outputs.size(); ++k)
    if (depends[size_t(outputs[k])]) grad[size_t(outputs[k])] = seeds[k];

  for (size_t i = numForwardOps; i-- > 0;) {
    if (g.ops[i].dead) continue;
    std::vector<ValueId> outGrads;
    bool any = false;
    for (ValueId o : g.ops[i].outputs) {
      outGrads.push_back(o == kNoValue ? kNoValue : grad[size_t(o)]);
      any |= outGrads.back() != kNoValue;
    }
    if (!any) continue;
    std::vector<bool> needs;
    bool anyNeed = false;
    for (ValueId in : g.ops[i].inputs) {
      needs.push_back(in != kNoValue && depends[size_t(in)] && isFloatType(g.type(in).dtype));
      anyNeed |= needs.back();
    }
    if (!anyNeed) continue;
    GradRule rule = lookupGradRule(g.ops[i].type);
    if (!rule) return opError(g, g.ops[i], "autodiff: no gradient rule for op " + g.ops[i].type);
    GradContext ctx(g, int32_t(i), outGrads, needs);
    rule(ctx);
    if (ctx.failed()) return ctx.takeError();
    // The graph may have grown: keep the per-value tables in step.
    grad.resize(g.values.size(), kNoValue);
    depends.resize(g.values.size(), false);
    const Op &op = ctx.fwd(); // a copy: the Adds below may reallocate g.ops
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      ValueId gin = ctx.inputGrads()[k];
      if (gin == kNoValue) continue;
      ValueId in = op.inputs[k];
      GradBuilder b(g, "grad/acc");
      grad[size_t(in)] = b.add(grad[size_t(in)], gin);
      if (b.failed()) return b.takeError();
    }
  }
  GradResult r;
  for (ValueId w : wrt) r.grads.push_back(grad[size_t(w)]);
  return r;
}

} // namespace megac::autodiff
