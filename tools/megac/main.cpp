#include "tools/megac/Driver.h"

#include "runtime/plan/PlanIO.h"

#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace megac::driver;

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  llvm::cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "megac " << megac::plan::kMegacVersion << " (plan format " << megac::plan::kFormatVersion << ")\n";
  });
  if (!llvm::cl::ParseCommandLineOptions(argc, argv,
                                         "megac: trains transformers far larger than GPU memory on one GPU\n"))
    return 2;
  if (importCmd()) return runImport();
  if (forwardCmd()) return runForward();
  if (optCmd()) return runOpt();
  if (gradCmd()) return runGrad();
  if (compileCmd()) return runCompile();
  if (runCmd()) return runRun();
  if (trainCmd()) return runTrain();
  if (exportCmd()) return runExport();
  if (planCmd()) return runPlan();
  llvm::errs() << "megac: give a subcommand (import, forward, grad, compile, run, train, plan, export, opt); see megac --help\n";
  return 2;
}
