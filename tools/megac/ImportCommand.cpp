// megac import MODEL.onnx --batch B --seq S [--print-ir]
#include "ir/Printer.h"
#include "tools/megac/Driver.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

namespace cl = llvm::cl;

namespace megac::driver {

static cl::opt<std::string> Model(cl::Positional, cl::desc("<model.onnx>"), cl::Required, cl::sub(importCmd()));
static cl::opt<bool> PrintIR("print-ir", cl::desc("Print the specialized IR instead of the summary"),
                             cl::sub(importCmd()));
static cl::opt<bool> PrintAll("print-all-constants", cl::desc("With --print-ir, print large constants too"),
                              cl::sub(importCmd()));

static std::string withCommas(int64_t n) {
  std::string s = std::to_string(n), r;
  int c = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (c && c % 3 == 0 && *it != '-') r.insert(r.begin(), ',');
    r.insert(r.begin(), *it);
    ++c;
  }
  return r;
}

int runImport() {
  auto flags = modelFlags();
  if (!flags) return reportError(flags.takeError());
  frontend::ImportStats stats;
  auto g = loadModel(Model, *flags, &stats);
  if (!g) return reportError(g.takeError());
  ir::Graph &graph = **g;
  auto &os = llvm::outs();
  if (PrintIR) {
    ir::PrintOptions po;
    if (!PrintAll) po.elideAbove = 64;
    ir::printGraph(graph, os, po);
    return 0;
  }
  os << "model: " << Model << " (ONNX IR " << stats.ir_version << ", opset " << graph.opset;
  if (!llvm::StringRef(stats.producer).trim().empty()) os << ", from " << llvm::StringRef(stats.producer).trim();
  os << ")\n";
  os << "inputs:";
  for (ir::ValueId in : graph.inputs) os << " " << graph.value(in).name << " " << graph.type(in).str();
  os << "\noutputs:";
  for (ir::ValueId out : graph.outputs) os << " " << graph.value(out).name << " " << graph.type(out).str();
  os << "\n";

  std::map<std::string, int> byType;
  for (const ir::Op &op : graph.ops) ++byType[op.type];
  os << "ops: " << graph.ops.size() << " after folding\n";
  for (auto &kv : byType) os << llvm::format("  %-24s %d\n", kv.first.c_str(), kv.second);

  int64_t nParams = 0, paramElems = 0, nConsts = 0, constElems = 0, nFrozen = 0;
  for (const ir::Value &v : graph.values) {
    if (v.kind == ir::ValueKind::Param) {
      ++nParams;
      paramElems += numElements(v.type.shape);
    } else if (v.kind == ir::ValueKind::Const) {
      ++nConsts;
      constElems += numElements(v.type.shape);
      nFrozen += v.frozen;
    }
  }
  os << "parameters: " << nParams << " tensors, " << withCommas(paramElems) << " elements (trainable)\n";
  for (const ir::Value &v : graph.values)
    if (v.kind == ir::ValueKind::Param)
      os << llvm::format("  %-56s %-18s %s\n", v.name.c_str(), v.type.str().c_str(),
                         withCommas(numElements(v.type.shape)).c_str());
  os << "constants: " << nConsts << " tensors, " << withCommas(constElems) << " elements";
  if (nFrozen) os << " (" << nFrozen << " frozen by --frozen)";
  os << "\n";
  for (const ir::Value &v : graph.values)
    if (v.kind == ir::ValueKind::Const && (v.frozen || (isFloatType(v.type.dtype) && v.hasData() == false) ||
                                           (v.producer < 0 && numElements(v.type.shape) > 1 &&
                                            isFloatType(v.type.dtype) && !v.frozen && v.external)))
      os << llvm::format("  %-56s %-18s %s\n", v.name.c_str(), v.type.str().c_str(), v.frozen ? "frozen" : "constant");
  for (const std::string &f : stats.missingDataFiles)
    os << "note: external data file '" << f << "' does not exist; the weights stored there have no data\n";
  if (!stats.dataLessWeights.empty())
    os << "note: " << stats.dataLessWeights.size()
       << " weights carry no data; which are parameters and which are buffers was decided from how each is "
          "used and may be approximate (override with --trainable/--frozen)\n";
  return 0;
}

} // namespace megac::driver
