#include "tools/megac/Driver.h"

#include "ir/Parser.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"

namespace cl = llvm::cl;

namespace megac::driver {

#define MEGAC_SUBCOMMAND(fn, name, desc)                                                                               \
  cl::SubCommand &fn() {                                                                                               \
    static cl::SubCommand s(name, desc);                                                                               \
    return s;                                                                                                          \
  }
MEGAC_SUBCOMMAND(importCmd, "import", "Import an ONNX model, specialize it and print a summary (or the IR)")
MEGAC_SUBCOMMAND(forwardCmd, "forward", "Run a model's forward pass on the CPU reference backend")
MEGAC_SUBCOMMAND(optCmd, "opt", "Run IR passes on a model or a textual IR file and print the IR")
MEGAC_SUBCOMMAND(gradCmd, "grad", "Compute the loss and every parameter's gradient on one batch (CPU)")
MEGAC_SUBCOMMAND(compileCmd, "compile",
                 "Import, differentiate and plan a model for training; writes a plan file (its optimizer flags are "
                 "the plan's; --grad-accum and --clip shape the plan's schedule)")
MEGAC_SUBCOMMAND(runCmd, "run",
                 "Train on a compiled plan (optimizer flags given here override the plan's, but --grad-accum and "
                 "--clip, which shape it: another value is an error that says to recompile)")
MEGAC_SUBCOMMAND(trainCmd, "train", "Compile and run in one command")
MEGAC_SUBCOMMAND(planCmd, "plan", "Inspect a plan: memory, transfers, units and templates")
MEGAC_SUBCOMMAND(exportCmd, "export", "Write trained weights from a checkpoint: ONNX, or a Hugging Face directory (--hf)")
#undef MEGAC_SUBCOMMAND


static cl::opt<int64_t> Batch("batch", cl::desc("Batch size (binds the first input's dim 0)"), cl::init(-1),
                              cl::sub(importCmd()), cl::sub(forwardCmd()), cl::sub(optCmd()), cl::sub(gradCmd()), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<int64_t> Seq("seq", cl::desc("Sequence length (binds the first input's dim 1)"), cl::init(-1),
                            cl::sub(importCmd()), cl::sub(forwardCmd()), cl::sub(optCmd()), cl::sub(gradCmd()), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::list<std::string> Dims("dim", cl::desc("Bind a symbolic dimension: --dim NAME=N"),
                                  cl::sub(importCmd()), cl::sub(forwardCmd()), cl::sub(optCmd()), cl::sub(gradCmd()), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> Trainable("trainable", cl::desc("Regex of initializer names to train"),
                                      cl::sub(importCmd()), cl::sub(forwardCmd()), cl::sub(optCmd()), cl::sub(gradCmd()), cl::sub(compileCmd()), cl::sub(trainCmd()));
static cl::opt<std::string> Frozen("frozen", cl::desc("Regex of initializer names to freeze"), cl::sub(importCmd()),
                                   cl::sub(forwardCmd()), cl::sub(optCmd()), cl::sub(gradCmd()), cl::sub(compileCmd()), cl::sub(trainCmd()));

static cl::opt<int64_t> SeqChunksOpt("seq-chunks",
                                     cl::desc("chunk-sequence: run each unit's MLP block over this many slices of the "
                                              "sequence (default 1)"),
                                     cl::init(1), cl::sub(optCmd()));
static cl::opt<int64_t> FoldLimit("fold-limit",
                                  cl::desc("Largest tensor (elements) specialize folds whole (default 2^28)"),
                                  cl::init(int64_t(1) << 28), cl::sub(optCmd()), cl::Hidden);

int reportError(llvm::Error e) {
  llvm::handleAllErrors(std::move(e), [](const llvm::ErrorInfoBase &info) {
    llvm::WithColor::error(llvm::errs(), "megac") << info.message() << "\n";
  });
  return 1;
}

static llvm::Error flagError(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

llvm::Expected<ModelFlags> modelFlags() {
  ModelFlags f;
  if (Batch.getNumOccurrences() && Batch <= 0) return flagError("--batch must be positive (got " + llvm::Twine(Batch) + ")");
  if (Seq.getNumOccurrences() && Seq <= 0) return flagError("--seq must be positive (got " + llvm::Twine(Seq) + ")");
  f.import.batch = Batch;
  f.import.seq = Seq;
  for (const std::string &d : Dims) {
    auto [name, val] = llvm::StringRef(d).split('=');
    int64_t n = 0;
    if (name.empty() || val.getAsInteger(10, n) || n <= 0)
      return flagError("--dim expects NAME=N with N > 0, got '" + d + "'");
    f.import.dims[name.str()] = n;
  }
  f.passes.trainable = Trainable;
  f.passes.frozen = Frozen;
  if (FoldLimit < 1) return flagError("--fold-limit must be positive (got " + llvm::Twine(FoldLimit) + ")");
  f.passes.foldLimit = FoldLimit;
  f.passes.sequenceChunks = SeqChunksOpt;
  return f;
}

llvm::Expected<std::unique_ptr<ir::Graph>> loadModel(const std::string &path, const ModelFlags &flags,
                                                     frontend::ImportStats *stats, bool runPipeline) {
  std::unique_ptr<ir::Graph> g;
  if (path == "-" || llvm::StringRef(path).endswith(".mir")) { // "-": IR text on stdin
    auto buf = path == "-" ? llvm::MemoryBuffer::getSTDIN() : llvm::MemoryBuffer::getFile(path);
    if (!buf) return flagError(path + ": " + buf.getError().message());
    auto parsed = ir::parseGraph((*buf)->getBuffer(), path == "-" ? "<stdin>" : path);
    if (!parsed) return parsed.takeError();
    g = std::move(*parsed);
  } else {
    auto imported = frontend::importOnnx(path, flags.import, stats);
    if (!imported) return imported.takeError();
    g = std::move(*imported);
  }
  if (runPipeline)
    if (auto e = passes::runPipeline(*g, passes::importPipeline(), flags.passes)) return std::move(e);
  return std::move(g);
}

llvm::Error writeTextFile(const std::string &path, llvm::function_ref<llvm::Error(llvm::raw_ostream &)> write) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec) return llvm::createStringError(ec, path + ": cannot write: " + ec.message());
  if (auto e = write(os)) return e;
  os.close();
  if (os.has_error()) {
    std::error_code werr = os.error();
    os.clear_error(); // or the stream's destructor aborts
    return llvm::createStringError(werr, path + ": cannot write: " + werr.message());
  }
  return llvm::Error::success();
}

} // namespace megac::driver
