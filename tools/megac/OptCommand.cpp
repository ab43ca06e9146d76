// megac opt FILE [--pass=NAME ...] [--no-pipeline]: runs passes, prints the IR.
#include "ir/Printer.h"
#include "tools/megac/Driver.h"

#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace megac::driver {

// Optional so that `megac opt --list-passes` needs no file; checked in runOpt.
static cl::opt<std::string> Input(cl::Positional, cl::desc("<model.onnx | file.mir>"), cl::sub(optCmd()));
static cl::list<std::string> Passes("pass", cl::desc("Run this pass (repeatable, in order)"), cl::sub(optCmd()));
static cl::opt<bool> ListPasses("list-passes", cl::desc("List the passes and exit"), cl::sub(optCmd()));
static cl::opt<bool> Elide("elide-constants", cl::desc("Print large constants as dense<...>"), cl::sub(optCmd()));

int runOpt() {
  if (ListPasses) {
    for (const passes::PassInfo &p : passes::allPasses()) llvm::outs() << p.name << "\t" << p.description << "\n";
    return 0;
  }
  if (Input.empty())
    return reportError(llvm::createStringError(llvm::inconvertibleErrorCode(),
                                               "opt: give a model (.onnx) or IR file (.mir, or - for stdin)"));
  auto flags = modelFlags();
  if (!flags) return reportError(flags.takeError());
  // ONNX files are imported bare (no pipeline) so that each pass can be seen alone.
  auto g = loadModel(Input, *flags, nullptr, /*runPipeline=*/false);
  if (!g) return reportError(g.takeError());
  for (const std::string &p : Passes)
    if (auto e = passes::runPass(**g, p, flags->passes)) return reportError(std::move(e));
  ir::PrintOptions po;
  if (Elide) po.elideAbove = 64;
  ir::printGraph(**g, llvm::outs(), po);
  return 0;
}

} // namespace megac::driver
