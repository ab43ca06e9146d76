#pragma once
// Reverse-mode differentiation of an IR graph, in the IR: the gradient ops
// are appended to the same graph after the forward ops, so a backward graph
// holds the forward it needs (recomputation) and DCE trims the rest.
//
// One rule per op type (passes/autodiff/*Grads.cpp), each a small function
// that emits the input gradients from the output gradients.
#include "passes/autodiff/GradBuilder.h"

#include <map>

namespace megac::autodiff {

class GradContext : public GradBuilder {
public:
  GradContext(ir::Graph &g, int32_t opIndex, const std::vector<ValueId> &outGrads, const std::vector<bool> &needs);

  const ir::Op &fwd() const { return op_; }
  const Attrs &attrs() const { return op_.attrs; }
  size_t numInputs() const { return op_.inputs.size(); }
  ValueId input(size_t i) const { return i < op_.inputs.size() ? op_.inputs[i] : ir::kNoValue; }
  ValueId output(size_t i) const { return op_.outputs[i]; }
  // Gradient flowing into output i; kNoValue when none does.
  ValueId gradOutput(size_t i) const { return i < outGrads_.size() ? outGrads_[i] : ir::kNoValue; }
  // Whether input i needs a gradient (it depends on a value being differentiated).
  bool needsGrad(size_t i) const { return i < needs_.size() && needs_[i]; }
  // Contributes `g` to input i's gradient. It must have the input's shape.
  void addGrad(size_t i, ValueId g);
  // An error naming the forward op.
  void unsupported(const llvm::Twine &why);

  const std::vector<ValueId> &inputGrads() const { return inGrads_; }

private:
  ir::Op op_;
  std::vector<ValueId> outGrads_;
  std::vector<bool> needs_;
  std::vector<ValueId> inGrads_;
};

using GradRule = void (*)(GradContext &);

void registerGradRule(llvm::StringRef opType, GradRule rule);
GradRule lookupGradRule(llvm::StringRef opType);

void registerElementwiseGrads();
void registerShapeGrads();
void registerReductionGrads();
void registerNNGrads();
void registerLossGrads();
void registerSwiGLUGrads();

struct GradResult {
  // Gradient of each requested value (kNoValue where it does not affect the
  // loss: the caller treats that as zeros).
  std::vector<ValueId> grads;
};

// Appends to `g` the ops computing d(sum_i <seeds[i], outputs[i]>)/d(wrt).
// `outputs[i]` is a forward value and `seeds[i]` its incoming gradient (a
// value of the same type already in g).
llvm::Expected<GradResult> differentiate(ir::Graph &g, const std::vector<ValueId> &outputs,
                                         const std::vector<ValueId> &seeds, const std::vector<ValueId> &wrt);

} // namespace megac::autodiff
