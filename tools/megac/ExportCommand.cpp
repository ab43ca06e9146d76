// megac export CHECKPOINT_DIR -o trained.onnx [--safetensors FILE] [--model PATH]
//                              [--hf OUT_DIR [--hf-config DIR] [--dtype fp32|bf16] [--max-shard-size 5GB]]
#include "frontend/OnnxExport.h"
#include "runtime/train/CheckpointWeights.h"
#include "runtime/weights/HfExport.h"
#include "tools/megac/Driver.h"

#include "runtime/core/TensorFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <optional>

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
static cl::opt<std::string> HfOut("hf",
                                  cl::desc("Write a directory that Hugging Face's from_pretrained loads: safetensors "
                                           "under the names the weights had at load, config and tokenizer files"),
                                  cl::value_desc("dir"), cl::sub(exportCmd()));
static cl::opt<std::string> HfConfig("hf-config",
                                     cl::desc("With --hf: the Hugging Face directory to copy config.json, "
                                              "generation_config.json and the tokenizer from (default: the one "
                                              "the weights were loaded from)"),
                                     cl::value_desc("dir"), cl::sub(exportCmd()));
static cl::opt<std::string> HfDType("dtype", cl::desc("With --hf: fp32 (default) or bf16 (rounded to nearest even)"),
                                    cl::value_desc("fp32|bf16"), cl::init("fp32"), cl::sub(exportCmd()));
static cl::opt<std::string> HfMaxShard("max-shard-size",
                                       cl::desc("With --hf: the largest safetensors file, as save_pretrained's "
                                                "max_shard_size (5GB, 500MB, 2GiB; default 5GB)"),
                                       cl::value_desc("size"), cl::init("5GB"), cl::sub(exportCmd()));
static cl::opt<std::string> ModelPath("model", cl::desc("The model trained (default: the path the checkpoint records)"),
                                      cl::value_desc("model.onnx"), cl::sub(exportCmd()));
static cl::opt<int64_t> ExternalDataAbove(
    "external-data-above",
    cl::desc("Initializer bytes in all above which initializers of >= 1 KB go to <out>.data"),
    cl::init(frontend::OnnxExportOptions().externalDataAbove), cl::Hidden, cl::sub(exportCmd()));

static llvm::Error exportError(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

// --hf: the whole export decided and checked, nothing written.
static llvm::Expected<runtime::HfExportPlan> planHf() {
  runtime::HfExportOptions opts;
  opts.checkpoint = CheckpointDir;
  opts.outDir = HfOut;
  opts.configDir = HfConfig;
  if (HfDType == "bf16") opts.dtype = DType::BF16;
  else if (HfDType != "fp32") return exportError("--dtype " + HfDType + ": the export writes fp32 or bf16");
  auto shard = runtime::parseShardSize(HfMaxShard);
  if (!shard) return shard.takeError();
  opts.maxShardBytes = *shard;
  return runtime::planHfExport(opts);
}

static void printCheckpoint(const std::string &stepDir, const plan::CheckpointMeta &meta) {
  auto &os = llvm::outs();
  os << "checkpoint " << stepDir << ": step " << meta.step() << ", " << meta.params_size() << " parameters\n";
  if (!meta.weights_source().empty())
    os << "initial weights: " << meta.weights_source() << " (" << meta.weight_names_size()
       << " parameters by name)\n";
}

static llvm::Error writeHf(const runtime::HfExportPlan &hf) {
  for (const std::string &line : hf.report) llvm::outs() << line << "\n";
  auto wrote = runtime::writeHfExport(hf);
  if (!wrote) return wrote.takeError();
  llvm::outs() << *wrote << "\n";
  return llvm::Error::success();
}

static llvm::Error runExportSteps() {
  if (OnnxOut.empty() && SafetensorsOut.empty() && HfOut.empty())
    return exportError("export needs -o trained.onnx, --safetensors FILE and/or --hf DIR");
  if (HfOut.empty())
    for (const cl::opt<std::string> *o : {&HfConfig, &HfDType, &HfMaxShard})
      if (o->getNumOccurrences()) return exportError("--" + o->ArgStr + " goes with --hf DIR");
  std::optional<runtime::HfExportPlan> hf;
  if (!HfOut.empty()) {
    auto p = planHf();
    if (!p) return p.takeError();
    hf = std::move(*p);
    if (OnnxOut.empty() && SafetensorsOut.empty()) {
      printCheckpoint(hf->stepDir, hf->meta);
      return writeHf(*hf);
    }
  }
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
  if (hf) return writeHf(*hf);
  return llvm::Error::success();
}

int runExport() {
  if (auto e = runExportSteps()) return reportError(std::move(e));
  return 0;
}

} // namespace megac::driver
