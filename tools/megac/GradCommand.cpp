// megac grad MODEL.onnx --input input_ids.pb --targets targets.pb -o DIR
//   writes DIR/loss.pb and DIR/grad/<initializer name>.pb.
#include "frontend/TensorProto.h"
#include "ir/Eval.h"
#include "tools/megac/Driver.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace megac::driver {


static cl::opt<std::string> Model(cl::Positional, cl::desc("<model.onnx>"), cl::Required, cl::sub(gradCmd()));
static cl::opt<std::string> InputFile("input", cl::desc("input_ids (serialized TensorProto)"), cl::Required,
                                      cl::sub(gradCmd()));
static cl::opt<std::string> TargetsFile("targets", cl::desc("targets, already shifted (serialized TensorProto)"),
                                        cl::Required, cl::sub(gradCmd()));
static cl::opt<std::string> OutDir("o", cl::desc("Output directory"), cl::value_desc("dir"), cl::Required,
                                   cl::sub(gradCmd()));
static cl::opt<int64_t> IgnoreIndex("ignore-index", cl::desc("Target value the loss ignores"), cl::init(-100),
                                    cl::sub(gradCmd()));

// File names hold any initializer name: characters other than [A-Za-z0-9._-]
// are percent-encoded.
std::string encodeFileName(llvm::StringRef name) {
  std::string r;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') r += c;
    else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      r += buf;
    }
  }
  if (r == "." || r == "..") r = "%2E" + r.substr(1);
  return r;
}

int runGrad() {
  auto flags = modelFlags();
  if (!flags) return reportError(flags.takeError());
  flags->passes.ignoreIndex = IgnoreIndex;
  auto ids = frontend::readTensorFile(InputFile);
  if (!ids) return reportError(ids.takeError());
  auto targets = frontend::readTensorFile(TargetsFile);
  if (!targets) return reportError(targets.takeError());
  if (targets->shape() != ids->shape())
    return reportError(llvm::createStringError(llvm::inconvertibleErrorCode(),
                                               TargetsFile + ": targets have shape " + shapeToString(targets->shape()) +
                                                   ", input_ids have " + shapeToString(ids->shape())));
  flags->import.firstInputShape = ids->shape();
  auto g = loadModel(Model, *flags);
  if (!g) return reportError(g.takeError());
  ir::Graph &graph = **g;
  std::string inputName = graph.value(graph.inputs[0]).name;
  std::vector<std::string> pipeline = passes::lossPipeline(flags->passes);
  for (const char *p : {"autodiff", "dce", "verify"}) pipeline.push_back(p);
  if (auto e = passes::runPipeline(graph, pipeline, flags->passes)) return reportError(std::move(e));
  Tensor tgt = *targets;
  if (tgt.dtype() != DType::I64) {
    Tensor t64(DType::I64, tgt.shape());
    for (int64_t i = 0; i < tgt.numel(); ++i) t64.data<int64_t>()[i] = tgt.getAsInt(i);
    tgt = t64;
  }
  auto outs = ir::runGraph(graph, {{inputName, *ids}, {graph.value(graph.inputs.back()).name, tgt}});
  if (!outs) return reportError(outs.takeError());
  llvm::SmallString<256> gradDir(OutDir.getValue());
  llvm::sys::path::append(gradDir, "grad");
  if (auto ec = llvm::sys::fs::create_directories(gradDir))
    return reportError(llvm::createStringError(ec, "cannot create " + std::string(gradDir) + ": " + ec.message()));
  llvm::SmallString<256> lossPath(OutDir.getValue());
  llvm::sys::path::append(lossPath, "loss.pb");
  if (auto e = frontend::writeTensorFile(std::string(lossPath), (*outs)[0], "loss")) return reportError(std::move(e));
  for (size_t i = 1; i < graph.outputs.size(); ++i) {
    std::string param = llvm::StringRef(graph.value(graph.outputs[i]).name).drop_front(5).str(); // "grad:"
    llvm::SmallString<256> p(gradDir);
    llvm::sys::path::append(p, encodeFileName(param) + ".pb");
    if (auto e = frontend::writeTensorFile(std::string(p), (*outs)[i], param)) return reportError(std::move(e));
  }
  llvm::outs() << "loss " << llvm::format("%.7g", (*outs)[0].getAsDouble(0)) << "; wrote " << graph.outputs.size() - 1
               << " gradients to " << gradDir << "\n";
  return 0;
}

} // namespace megac::driver
