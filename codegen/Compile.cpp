#include "codegen/Compile.h"


namespace megac::codegen {

llvm::Expected<plan::Plan> compileForTraining(const std::string &modelPath, const frontend::ImportOptions &import,
                                              const passes::PassOptions &passOpts, const CodegenOptions &co) {
  auto g = frontend::importOnnx(modelPath, import);
  if (!g) return g.takeError();
  std::vector<std::string> pipeline = passes::importPipeline();
  for (const char *p : {"append-loss", "partition-units", "verify"}) pipeline.push_back(p);
  if (auto e = passes::runPipeline(**g, pipeline, passOpts)) return std::move(e);
  CodegenOptions opts = co;
  opts.modelPath = modelPath;
  opts.ignoreIndex = passOpts.ignoreIndex;
  auto plan = buildPlan(**g, opts);
  if (!plan) return plan.takeError();
  if (auto e = plan::applyNoDecay(*plan)) return std::move(e);
  return plan;
}

} // namespace megac::codegen
