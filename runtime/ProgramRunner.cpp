#include "runtime/ProgramRunner.h"

#include <array>
#include <cmath>
#include <cstring>
#include <map>

#include "runtime/cpu/Kernel.h"
#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/AttentionStash.h"

namespace megac::runtime {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

llvm::Expected<PreparedProgram> PreparedProgram::prepare(const plan::Program &p, const std::string &what) {
  PreparedProgram pp;
  pp.what_ = what;
  pp.values_.resize(size_t(p.values_size()));
  pp.constants_.resize(size_t(p.values_size()));
  for (int i = 0; i < p.values_size(); ++i) {
    const auto &v = p.values(i);
    Value &pv = pp.values_[size_t(i)];
    pv.dtype = DType(int(v.type().dtype()));
    pv.shape.assign(v.type().shape().begin(), v.type().shape().end());
    pv.name = v.name();
    if (v.kind() == plan::Program::Value::CONSTANT) {
      pv.constant = true;
      if (v.constant().data().empty() && numElements(pv.shape) * int64_t(dtypeSize(pv.dtype)) != 0)
        return err(what + ": constant '" + v.name() + "' has no data (the model was compiled without weights)");
      auto t = plan::fromProto(v.constant());
      if (!t) return err(what + ": constant '" + v.name() + "': " + llvm::toString(t.takeError()));
      pp.constants_[size_t(i)] = *t;
    }
  }
  auto checkId = [&](int32_t id) { return id >= -1 && id < p.values_size(); };
  for (int k = 0; k < p.ops_size(); ++k) {
    const auto &o = p.ops(k);
    Op op;
    op.type = o.type();
    op.name = o.name();
    for (int32_t in : o.inputs()) {
      if (!checkId(in)) return err(what + ": op '" + o.name() + "' reads a value that does not exist");
      op.inputs.push_back(in);
      if (in >= 0) pp.values_[size_t(in)].lastUse = k;
    }
    for (int32_t out : o.outputs()) {
      if (!checkId(out)) return err(what + ": op '" + o.name() + "' writes a value that does not exist");
      op.outputs.push_back(out);
    }
    auto attrs = plan::fromProto(o.attributes());
    if (!attrs) return err(what + ": op '" + o.name() + "': " + llvm::toString(attrs.takeError()));
    op.attrs = std::move(*attrs);
    if (!cpu::lookupKernel(op.type)) return err(what + ": op '" + o.name() + "' (" + op.type + ") has no CPU kernel");
    pp.ops_.push_back(std::move(op));
  }
  pp.stashSource_.assign(pp.ops_.size(), -1);
  pp.stashesOperands_.assign(pp.ops_.size(), false);
  for (int k = 0; k < p.ops_size(); ++k) {
    if (!plan::hasStashedOperands(p.ops(k))) continue;
    std::string why;
    const int f = plan::stashSourceOf(p, k, &why);
    if (f < 0) return err(what + ": op '" + p.ops(k).name() + "' reads its Q, K and V from the attention stash, but " + why);
    pp.stashSource_[size_t(k)] = f;
    pp.stashesOperands_[size_t(f)] = true;
  }
  if (p.arena_offsets_size() == p.values_size() && p.values_size() > 0) {
    pp.hasArena_ = true;
    pp.arenaBytes_ = p.arena_bytes();
    for (int i = 0; i < p.values_size(); ++i) pp.values_[size_t(i)].arenaOffset = p.arena_offsets(i);
  }
  pp.arguments_.assign(p.arguments().begin(), p.arguments().end());
  pp.results_.assign(p.results().begin(), p.results().end());
  for (int32_t r : pp.results_) {
    if (!checkId(r) || r < 0) return err(what + ": a result refers to no value");
    pp.values_[size_t(r)].lastUse = int32_t(pp.ops_.size());
  }
  return pp;
}

// The first NaN or +Inf of a float tensor, or -1.
static int64_t firstNanOrPosInf(const Tensor &t) {
  if (!t.raw() || !isFloatType(t.dtype())) return -1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x = t.getAsDouble(i);
    if (std::isnan(x) || x == INFINITY) return i;
  }
  return -1;
}

llvm::Error PreparedProgram::bindArguments(const std::vector<Tensor> &args, std::vector<Tensor> &env) const {
  env.assign(values_.size(), Tensor());
  for (size_t i = 0; i < values_.size(); ++i)
    if (values_[i].constant) env[i] = constants_[i];
  for (size_t i = 0; i < args.size(); ++i) {
    const Value &v = values_[size_t(arguments_[i])];
    if (args[i].dtype() != v.dtype || args[i].shape() != v.shape)
      return err(what_ + ": argument '" + v.name + "' is " + dtypeName(args[i].dtype()) + shapeToString(args[i].shape()) +
                 ", expected " + dtypeName(v.dtype) + shapeToString(v.shape));
    env[size_t(arguments_[i])] = args[i];
  }
  return llvm::Error::success();
}

llvm::Expected<std::vector<Tensor>> PreparedProgram::run(const std::vector<Tensor> &args, NonFiniteAt *check) const {
  if (args.size() != arguments_.size())
    return err(what_ + ": expected " + llvm::Twine(arguments_.size()) + " arguments, got " + llvm::Twine(args.size()));
  std::vector<Tensor> env;
  if (auto e = bindArguments(args, env)) return std::move(e);
  for (size_t k = 0; k < ops_.size(); ++k) {
    const Op &op = ops_[k];
    cpu::KernelContext ctx{op.attrs, {}, {}};
    for (int32_t in : op.inputs) ctx.inputs.push_back(in < 0 ? nullptr : &env[size_t(in)]);
    std::vector<Tensor> scratch(op.outputs.size());
    for (size_t o = 0; o < op.outputs.size(); ++o) {
      int32_t id = op.outputs[o];
      const Value &v = values_[size_t(id < 0 ? 0 : id)];
      if (id >= 0) {
        env[size_t(id)] = Tensor(v.dtype, v.shape);
        ctx.outputs.push_back(&env[size_t(id)]);
      } else {
        ctx.outputs.push_back(&scratch[o]);
      }
    }
    if (auto e = cpu::runKernel(op.type, ctx)) return err(what_ + ": op '" + op.name + "': " + llvm::toString(std::move(e)));
    for (size_t o = 0; check && o < op.outputs.size(); ++o) {
      int64_t bad = op.outputs[o] < 0 ? -1 : firstNanOrPosInf(env[size_t(op.outputs[o])]);
      if (bad < 0) continue;
      *check = {op.name, op.type, env[size_t(op.outputs[o])].getAsDouble(bad), bad, int32_t(o), -1};
      for (size_t i = 0; i < args.size() && check->argument < 0; ++i)
        for (int32_t in : op.inputs)
          if (in == arguments_[i] && firstNanOrPosInf(env[size_t(in)]) >= 0) check->argument = int32_t(i);
      return err(what_ + ": op '" + op.name + "' (" + op.type + ") gives " + std::to_string(check->value) +
                 " at element " + llvm::Twine(bad) + " of output " + llvm::Twine(o));
    }
    for (int32_t in : op.inputs)
      if (in >= 0 && values_[size_t(in)].lastUse == int32_t(k) && !values_[size_t(in)].constant) env[size_t(in)] = Tensor();
  }
  std::vector<Tensor> out;
  for (int32_t r : results_) out.push_back(env[size_t(r)]);
  return out;
}

llvm::Error PreparedProgram::runInArena(const std::vector<Tensor> &args, uint8_t *arena, int64_t arenaBytes,
                                        const std::vector<Tensor> &results, ArenaObserver *observer) const {
  if (!hasArena_) return err(what_ + ": the plan gives this program no arena offsets (recompile it)");
  if (arenaBytes < arenaBytes_)
    return err(what_ + ": needs an arena of " + llvm::Twine(arenaBytes_) + " bytes, has " + llvm::Twine(arenaBytes));
  if (args.size() != arguments_.size() || results.size() != results_.size())
    return err(what_ + ": called with " + llvm::Twine(args.size()) + " arguments and " + llvm::Twine(results.size()) +
               " results, expected " + llvm::Twine(arguments_.size()) + " and " + llvm::Twine(results_.size()));
  std::vector<Tensor> env;
  if (auto e = bindArguments(args, env)) return e;
  std::vector<int32_t> tag(values_.size(), -1);
  auto bytesOf = [&](const Value &v) { return numElements(v.shape) * int64_t(dtypeSize(v.dtype)); };
  std::map<int32_t, std::array<Tensor, 3>> stash; // forward op -> copies of its Q, K, V
  for (size_t k = 0; k < ops_.size(); ++k) {
    const Op &op = ops_[k];
    const int32_t stashFrom = stashSource_[k];
    if (stashFrom >= 0 && !stash.count(stashFrom))
      return err(what_ + ": op '" + op.name + "' reads its Q, K and V from the attention stash, which its forward '" +
                 ops_[size_t(stashFrom)].name + "' did not fill");
    cpu::KernelContext ctx{op.attrs, {}, {}};
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const int32_t in = op.inputs[i];
      const bool stashed = stashFrom >= 0 && i >= 1 && i <= 3;
      ctx.inputs.push_back(in < 0 ? nullptr : stashed ? &stash[stashFrom][i - 1] : &env[size_t(in)]);
      if (in >= 0 && values_[size_t(in)].arenaOffset >= 0 && !env[size_t(in)].defined())
        return err(what_ + ": op '" + op.name + "' reads '" + values_[size_t(in)].name + "' before any op writes it");
    }
    // The op's inputs, checked after its outputs took their places (below):
    // an output placed on a live input's bytes is a wrong read.
    auto checkInputs = [&]() -> llvm::Error {
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        const int32_t in = op.inputs[i];
        if (stashFrom >= 0 && i >= 1 && i <= 3) continue; // read from the stash's copies
        if (!observer || in < 0 || values_[size_t(in)].arenaOffset < 0) continue;
        if (auto e = observer->read(values_[size_t(in)].arenaOffset, bytesOf(values_[size_t(in)]), tag[size_t(in)],
                                    values_[size_t(in)].name, op.name))
          return e;
      }
      return llvm::Error::success();
    };
    // A view whose output the planner put on its input's bytes: those bytes are its value already.
    if (plan::isViewOp(op.type) && op.inputs.size() >= 1 && op.outputs.size() == 1 && op.inputs[0] >= 0 && op.outputs[0] >= 0) {
      const Value &in = values_[size_t(op.inputs[0])], &out = values_[size_t(op.outputs[0])];
      if (in.arenaOffset >= 0 && in.arenaOffset == out.arenaOffset && bytesOf(in) == bytesOf(out)) {
        if (auto e = checkInputs()) return e;
        env[size_t(op.outputs[0])] = env[size_t(op.inputs[0])].reshaped(out.shape);
        tag[size_t(op.outputs[0])] = tag[size_t(op.inputs[0])];
        continue;
      }
    }
    std::vector<Tensor> scratch(op.outputs.size());
    std::vector<void *> placed(op.outputs.size(), nullptr);
    for (size_t o = 0; o < op.outputs.size(); ++o) {
      int32_t id = op.outputs[o];
      if (id < 0) {
        ctx.outputs.push_back(&scratch[o]);
        continue;
      }
      const Value &v = values_[size_t(id)];
      const int64_t bytes = bytesOf(v);
      if (!plan::blockWithin(v.arenaOffset, bytes, arenaBytes_))
        return err(what_ + ": value '" + v.name + "' has no place in the arena (offset " + llvm::Twine(v.arenaOffset) +
                   ", " + llvm::Twine(bytes) + " bytes, arena " + llvm::Twine(arenaBytes_) + ")");
      placed[o] = arena + v.arenaOffset;
      std::memset(placed[o], 0, size_t(bytes)); // as run()'s fresh tensors
      env[size_t(id)] = Tensor::view(v.dtype, v.shape, placed[o]);
      ctx.outputs.push_back(&env[size_t(id)]);
      tag[size_t(id)] = id;
      if (observer) observer->write(v.arenaOffset, bytes, id);
    }
    if (auto e = checkInputs()) return e;
    if (auto e = cpu::runKernel(op.type, ctx)) return err(what_ + ": op '" + op.name + "': " + llvm::toString(std::move(e)));
    if (stashesOperands_[k]) // its gradient reads these after their bytes may have gone to others
      for (size_t i = 0; i < 3; ++i) stash[int32_t(k)][i] = ctx.inputs[i]->clone();
    for (size_t o = 0; o < op.outputs.size(); ++o) {
      int32_t id = op.outputs[o];
      if (id < 0) continue;
      const Value &v = values_[size_t(id)];
      Tensor &t = env[size_t(id)];
      if (t.raw() != placed[o]) { // the kernel replaced its output: its bytes go to the value's place
        if (t.dtype() != v.dtype || t.shape() != v.shape)
          return err(what_ + ": op '" + op.name + "' gave '" + v.name + "' as " + dtypeName(t.dtype()) +
                     shapeToString(t.shape()) + ", the plan says " + dtypeName(v.dtype) + shapeToString(v.shape));
        std::memcpy(placed[o], t.raw(), t.nbytes());
        t = Tensor::view(v.dtype, v.shape, placed[o]);
      }
    }
  }
  for (size_t i = 0; i < results_.size(); ++i) {
    const int32_t id = results_[i];
    const Value &v = values_[size_t(id)];
    const Tensor &src = env[size_t(id)];
    Tensor dst = results[i];
    if (dst.dtype() != v.dtype || dst.shape() != v.shape)
      return err(what_ + ": result '" + v.name + "' is " + dtypeName(v.dtype) + shapeToString(v.shape) +
                 "; its destination is " + dtypeName(dst.dtype()) + shapeToString(dst.shape()));
    if (!src.defined()) return err(what_ + ": result '" + v.name + "' is never written");
    if (v.arenaOffset >= 0 && observer)
      if (auto e = observer->read(v.arenaOffset, bytesOf(v), tag[size_t(id)], v.name, "(the program's results)"))
        return e;
    if (dst.raw() != src.raw() && src.nbytes()) std::memmove(dst.raw(), src.raw(), src.nbytes());
  }
  return llvm::Error::success();
}

} // namespace megac::runtime
