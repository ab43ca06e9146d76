// megac forward MODEL.onnx --input input_ids.pb [--input NAME=FILE] [--weights W] [-o out.pb]
#include "frontend/TensorProto.h"
#include "ir/Eval.h"
#include "ir/TiedWeights.h"
#include "runtime/weights/WeightFiles.h"
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

static cl::opt<std::string> WeightsPath(
    "weights",
    cl::desc("The weights to compute with: Hugging Face safetensors (a save_pretrained directory, "
             "model.safetensors, or model.safetensors.index.json), an ONNX file, or a megac checkpoint directory; "
             "matched to the model's parameters by name"),
    cl::value_desc("PATH"), cl::sub(forwardCmd()));

// Gives the graph's parameters (and frozen weights without data) the bytes
// of the --weights tensors they match.
static llvm::Error bindWeights(ir::Graph &g, const std::string &weights) {
  auto src = runtime::openWeightSource(weights);
  if (!src) return src.takeError();
  runtime::WeightReader &s = **src;
  const std::set<ir::ValueId> tied = ir::tiedEmbeddingHeads(g);
  std::vector<ir::ValueId> ids;
  std::vector<runtime::WantedTensor> wanted;
  for (ir::ValueId v = 0; v < ir::ValueId(g.values.size()); ++v) {
    const ir::Value &val = g.value(v);
    bool weight = val.kind == ir::ValueKind::Param ||
                  (val.kind == ir::ValueKind::Const && !val.hasData() && isFloatType(val.type.dtype));
    if (!weight) continue;
    if (val.type.dtype != DType::F32)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     g.sourcePath + ": weight '" + val.name + "' is " + dtypeName(val.type.dtype) +
                                         "; --weights gives fp32 weights: export the model in float32");
    ids.push_back(v);
    wanted.push_back({val.name, val.type.shape, tied.count(v) > 0});
  }
  runtime::NameMatchOptions mo;
  mo.graphLabel = g.sourcePath;
  mo.sourceLabel = weights;
  std::vector<float *> dsts;
  for (ir::ValueId id : ids) {
    ir::Value &val = g.value(id);
    val.data = Tensor(DType::F32, val.type.shape);
    val.external.reset();
    dsts.push_back(val.data->data<float>());
  }
  auto load = runtime::loadMatched(s, wanted, dsts, mo);
  if (!load) return load.takeError();
  auto &os = llvm::outs();
  os << "weights: " << weights << " (" << s.describe() << ")\n";
  for (const std::string &n : load->match.notes) os << "weights: " << n << "\n";
  os << "weights: " << runtime::loadSummary(load->match.matched, ids.size(), "weights", load->stats) << "\n";
  return llvm::Error::success();
}

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
  if (!WeightsPath.empty())
    if (auto e = bindWeights(graph, WeightsPath)) return reportError(std::move(e));
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
