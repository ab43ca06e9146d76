// megac export CHECKPOINT_DIR -o trained.onnx [--safetensors FILE] [--model PATH]
#include "frontend/OnnxExport.h"
#include "runtime/train/CheckpointWeights.h"
#include "tools/megac/Driver.h"

#include "runtime/core/TensorFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace cl = llvm::cl;

namespace megac::driver {

static cl::opt<std::string> CheckpointDir(cl::Positional, cl::desc("<checkpoint dir>"), cl::Required,
                                          cl::sub(exportCmd()));
static cl::opt<std::string> OnnxOut("o", cl::desc("ONNX model to write, with the trained weights"),
                                    cl::value_desc("trained.onnx"), cl::sub(exportCmd()));
static cl::opt<std::string> SafetensorsOut(
    "safetensors",
    cl::desc("Also write the trained parameters as one safetensors file under the graph's parameter names and "
             "shapes (metadata format \"megac\"; for Hugging Face, use --hf)"),
    cl::value_desc("file"), cl::sub(exportCmd()));
static cl::opt<std::string> ModelPath("model", cl::desc("The model trained (default: the path the checkpoint records)"),
                                      cl::value_desc("model.onnx"), cl::sub(exportCmd()));
static cl::opt<int64_t> ExternalDataAbove(
    "external-data-above",
    cl::desc("Initializer bytes in all above which initializers of >= 1 KB go to <out>.data"),
    cl::init(frontend::OnnxExportOptions().externalDataAbove), cl::Hidden, cl::sub(exportCmd()));

static llvm::Error exportError(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static llvm::Error runExportSteps() {
  if (OnnxOut.empty() && SafetensorsOut.empty())
    return exportError("export needs -o trained.onnx and/or --safetensors FILE");
  auto ckpt = runtime::readCheckpointWeights(CheckpointDir);
  if (!ckpt) return ckpt.takeError();
  // Serialize the safetensors bytes first so that no error can come after a
  // file was written.
  std::string safetensors;
  if (!SafetensorsOut.empty()) {
    std::vector<NamedTensor> sorted = ckpt->params;
    std::sort(sorted.begin(), sorted.end(), [](const NamedTensor &a, const NamedTensor &b) { return a.name < b.name; });
    auto bytes = serializeSafetensors(sorted, {{"format", "megac"}});
    if (!bytes) return bytes.takeError();
    safetensors = std::move(*bytes);
  }
  auto &os = llvm::outs();
  os << "checkpoint " << ckpt->stepDir << ": step " << ckpt->meta.step() << ", " << ckpt->params.size()
     << " parameters\n";
  if (!ckpt->meta.weights_source().empty())
    os << "initial weights: " << ckpt->meta.weights_source() << " (" << ckpt->meta.weight_names_size()
       << " parameters by name)\n";
  if (!OnnxOut.empty()) {
    std::string model = ModelPath.empty() ? ckpt->meta.model_path() : std::string(ModelPath);
    if (model.empty()) return exportError(ckpt->stepDir + ": the checkpoint names no model; pass --model PATH");
    frontend::OnnxExportOptions opts;
    opts.externalDataAbove = ExternalDataAbove;
    auto r = frontend::exportOnnxWithWeights(model, ckpt->params, OnnxOut, opts);
    if (!r) {
      if (ModelPath.empty() && !llvm::sys::fs::exists(model))
        return exportError(llvm::toString(r.takeError()) + " (pass --model PATH if the model moved)");
      return r.takeError();
    }
    os << "wrote " << OnnxOut << ": " << r->replaced << " initializers replaced";
    if (r->promotedInputs) os << ", " << r->promotedInputs << " weight inputs made initializers";
    if (!r->dataPath.empty()) os << "; " << r->externalTensors << " tensors in " << r->dataPath;
    os << "\n";
  }
  if (!SafetensorsOut.empty()) {
    if (auto e = writeFileAtomically(SafetensorsOut, safetensors)) return e;
    os << "wrote " << SafetensorsOut << "\n";
  }
  return llvm::Error::success();
}

int runExport() {
  if (auto e = runExportSteps()) return reportError(std::move(e));
  return 0;
}

} // namespace megac::driver
