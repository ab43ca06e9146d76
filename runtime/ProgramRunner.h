#pragma once
// Interprets a plan Program on the CPU kernels. Preparing converts the
// attributes and constants once; a prepared program is stateless and shared
// by every unit of its template (weights come in as arguments).
#include "runtime/core/Tensor.h"
#include "runtime/plan/PlanIO.h"

#include <vector>

namespace megac::runtime {

class PreparedProgram {
public:
  static llvm::Expected<PreparedProgram> prepare(const plan::Program &p, const std::string &what);

  // Where a checked run first met a NaN or +Inf (-Inf is what masks hold).
  struct NonFiniteAt {
    std::string op, opType;
    double value = 0;
    int64_t element = 0;
    int32_t output = 0;
    int32_t argument = -1; // an input holding NaN/+Inf that is the program's argument number, or -1
  };

  // Runs the program; `args` must match the program's arguments in order.
  // With `check`, every op's outputs are checked, and the first NaN or +Inf
  // stops the run with an error and fills *check.
  llvm::Expected<std::vector<Tensor>> run(const std::vector<Tensor> &args, NonFiniteAt *check = nullptr) const;

  size_t numArguments() const { return arguments_.size(); }

private:
  struct Op {
    std::string type, name;
    std::vector<int32_t> inputs, outputs;
    Attrs attrs;
  };
  struct Value {
    DType dtype;
    Shape shape;
    std::string name;
    int32_t lastUse = -1;  // op index of the last reader
    bool constant = false;
  };
  std::string what_;
  std::vector<Value> values_;
  std::vector<Tensor> constants_; // indexed like values_
  std::vector<Op> ops_;
  std::vector<int32_t> arguments_, results_;
};

} // namespace megac::runtime
