// megac forward MODEL.onnx --input input_ids.pb [--input NAME=FILE] [-o out.pb]
#include "frontend/TensorProto.h"
#include "ir/Eval.h"
#include "tools/megac/Driver.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

namespace cl = llvm::cl;

namespace megac::driver {

static cl::opt<std::string> Model(cl::Positional, cl::desc("<model.onnx>"), cl::Required, cl::sub(forwardCmd()));
static cl::list<std::string> Inputs("input", cl::desc("FILE binds the first input; NAME=FILE any input"),
                                    cl::sub(forwardCmd()));
static cl::opt<std::string> Output("o", cl::desc("Write the first output as a serialized TensorProto"),
                                   cl::value_desc("file"), cl::sub(forwardCmd()));

static void printSummary(const std::string &name, const Tensor &t) {
  auto &os = llvm::outs();
  os << name << ": " << dtypeName(t.dtype()) << shapeToString(t.shape()) << "\n";
  int64_t n = t.numel();
  if (n == 0) return;
  double sum = 0, sq = 0, mn = INFINITY, mx = -INFINITY;
  int64_t nonFinite = 0;
  for (int64_t i = 0; i < n; ++i) {
    double v = t.getAsDouble(i);
    if (!std::isfinite(v)) {
      ++nonFinite;
      continue;
    }
    sum += v;
    sq += v * v;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  double mean = sum / double(n), var = sq / double(n) - mean * mean;
  os << llvm::format("  min %.6g  max %.6g  mean %.6g  std %.6g", mn, mx, mean, std::sqrt(std::max(var, 0.0)));
  if (nonFinite) os << "  non-finite " << nonFinite;
  os << "\n  first:";
  for (int64_t i = 0; i < std::min<int64_t>(n, 6); ++i) os << llvm::format(" %.6g", t.getAsDouble(i));
  os << "\n";
}

int runForward() {
  auto flags = modelFlags();
  if (!flags) return reportError(flags.takeError());
  std::map<std::string, Tensor> named;
  std::optional<Tensor> first;
  for (const std::string &spec : Inputs) {
    auto [name, file] = llvm::StringRef(spec).split('=');
    bool positional = file.empty();
    std::string path = positional ? spec : file.str();
    auto t = frontend::readTensorFile(path);
    if (!t) return reportError(t.takeError());
    if (positional) {
      if (first) return reportError(llvm::createStringError(llvm::inconvertibleErrorCode(),
                                                            "--input FILE given twice; use --input NAME=FILE"));
      first = *t;
      flags->import.firstInputShape = t->shape();
    } else {
      named[name.str()] = *t;
      flags->import.inputShapes[name.str()] = t->shape();
    }
  }
  auto g = loadModel(Model, *flags);
  if (!g) return reportError(g.takeError());
  ir::Graph &graph = **g;
  if (first) named[graph.value(graph.inputs[0]).name] = *first;
  auto outs = ir::runGraph(graph, named);
  if (!outs) return reportError(outs.takeError());
  if (!Output.empty()) {
    if (auto e = frontend::writeTensorFile(Output, (*outs)[0], graph.value(graph.outputs[0]).name))
      return reportError(std::move(e));
    return 0;
  }
  for (size_t i = 0; i < outs->size(); ++i) printSummary(graph.value(graph.outputs[i]).name, (*outs)[i]);
  return 0;
}

} // namespace megac::driver
