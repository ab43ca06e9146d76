#pragma once
// Shared pieces of the megac driver's subcommands.
#include "frontend/OnnxImport.h"
#include "ir/Graph.h"
#include "passes/Pass.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>

namespace megac::driver {

// Subcommands, constructed on first use (options in several files refer to
// them, and static initialization order across files is unspecified).
llvm::cl::SubCommand &importCmd();
llvm::cl::SubCommand &forwardCmd();
llvm::cl::SubCommand &optCmd();
llvm::cl::SubCommand &gradCmd();
llvm::cl::SubCommand &compileCmd();
llvm::cl::SubCommand &runCmd();
llvm::cl::SubCommand &trainCmd();
llvm::cl::SubCommand &planCmd();
llvm::cl::SubCommand &exportCmd();

// Flags that import a model: --batch, --seq, --dim, --trainable, --frozen.
struct ModelFlags {
  frontend::ImportOptions import;
  passes::PassOptions passes;
};
llvm::Expected<ModelFlags> modelFlags();

// Imports an ONNX file (or parses a .mir text file) and runs the import
// pipeline. `stats` is filled for ONNX files.
llvm::Expected<std::unique_ptr<ir::Graph>> loadModel(const std::string &path, const ModelFlags &flags,
                                                     frontend::ImportStats *stats = nullptr,
                                                     bool runPipeline = true);

int runImport();
int runForward();
int runOpt();
int runGrad();
int runCompile();
int runRun();
int runTrain();
int runExport();
int runPlan();

// A file name for any tensor name: other than [A-Za-z0-9._-] is percent-encoded.
std::string encodeFileName(llvm::StringRef name);

// Writes a file through `write` (a page, a report), naming the file in any error.
llvm::Error writeTextFile(const std::string &path, llvm::function_ref<llvm::Error(llvm::raw_ostream &)> write);

// Prints "megac: error: <msg>" and returns 1.
int reportError(llvm::Error e);

} // namespace megac::driver
