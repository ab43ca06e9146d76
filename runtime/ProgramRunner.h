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

  // Runs the program; `args` must match the program's arguments in order.
  llvm::Expected<std::vector<Tensor>> run(const std::vector<Tensor> &args) const;

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
