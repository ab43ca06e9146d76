#include "runtime/ProgramRunner.h"

#include <cmath>

#include "runtime/cpu/Kernel.h"

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

llvm::Expected<std::vector<Tensor>> PreparedProgram::run(const std::vector<Tensor> &args, NonFiniteAt *check) const {
  if (args.size() != arguments_.size())
    return err(what_ + ": expected " + llvm::Twine(arguments_.size()) + " arguments, got " + llvm::Twine(args.size()));
  std::vector<Tensor> env(values_.size());
  for (size_t i = 0; i < values_.size(); ++i)
    if (values_[i].constant) env[i] = constants_[i];
  for (size_t i = 0; i < args.size(); ++i) {
    const Value &v = values_[size_t(arguments_[i])];
    if (args[i].dtype() != v.dtype || args[i].shape() != v.shape)
      return err(what_ + ": argument '" + v.name + "' is " + dtypeName(args[i].dtype()) + shapeToString(args[i].shape()) +
                 ", expected " + dtypeName(v.dtype) + shapeToString(v.shape));
    env[size_t(arguments_[i])] = args[i];
  }
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

} // namespace megac::runtime
