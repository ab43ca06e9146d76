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

  // What a run with its temporaries in an arena reads and writes there
  // (runtime/stream: the version stamps of a simulated device allocation).
  // `tag` names the bytes' contents: a value's id, or for a view sharing its
  // input's bytes the id its chain starts from.
  class ArenaObserver {
  public:
    virtual ~ArenaObserver() = default;
    virtual llvm::Error read(int64_t offset, int64_t bytes, int32_t tag, const std::string &value,
                             const std::string &op) = 0;
    virtual void write(int64_t offset, int64_t bytes, int32_t tag) = 0;
  };

  // Runs the program as the GPU runtime does: every temporary at its place
  // in `arena` (Program.arena_offsets; a view op whose output shares its
  // input's bytes runs no kernel), outputs zero-filled before their op as
  // run() allocates them, and each result copied into results[i] (views of
  // the caller's buffers, of the results' dtypes and shapes). `args` may be
  // views. The arithmetic is run()'s, bit for bit. A gradient that takes its
  // Q, K and V from the attention stash reads copies its forward's run took
  // (their arena bytes may hold others by then).
  llvm::Error runInArena(const std::vector<Tensor> &args, uint8_t *arena, int64_t arenaBytes,
                         const std::vector<Tensor> &results, ArenaObserver *observer = nullptr) const;
  int64_t arenaBytes() const { return arenaBytes_; }

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
    int64_t arenaOffset = -1; // Program.arena_offsets
  };
  // env: every value's tensor, constants and the arguments (checked) in place.
  llvm::Error bindArguments(const std::vector<Tensor> &args, std::vector<Tensor> &env) const;

  std::string what_;
  std::vector<Value> values_;
  std::vector<Tensor> constants_; // indexed like values_
  std::vector<Op> ops_;
  // The attention stash (runtime/plan/AttentionStash.h): per op, the
  // gradient reading its Q, K, V from the copies a run takes after the
  // forward Attention at stashSource_ (-1: none), and per op whether a
  // gradient reads such copies of its operands.
  std::vector<int32_t> stashSource_;
  std::vector<bool> stashesOperands_;
  std::vector<int32_t> arguments_, results_;
  bool hasArena_ = false;
  int64_t arenaBytes_ = 0;
};

} // namespace megac::runtime
