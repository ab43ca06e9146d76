// The node tests in test/data/nn_ops (written by generate.py there, expected
// outputs from onnx's reference implementation): import, run the import
// pipeline, execute, compare every output.
#include "frontend/OnnxImport.h"
#include "frontend/TensorProto.h"
#include "ir/Eval.h"
#include "passes/Pass.h"

#include "onnx.pb.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

using namespace megac;

namespace {

std::string caseRoot() { return std::string(MEGAC_TEST_DATA) + "/nn_ops"; }

std::vector<std::string> caseNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(caseRoot(), ec), end; it != end && !ec; it.increment(ec))
    if (llvm::sys::fs::is_directory(it->path())) names.push_back(llvm::sys::path::filename(it->path()).str());
  std::sort(names.begin(), names.end());
  return names;
}

// The model's graph input names, in order (its inputs have no initializers).
std::vector<std::string> inputNames(const std::string &modelPath) {
  onnx::ModelProto m;
  std::ifstream f(modelPath, std::ios::binary);
  if (!m.ParseFromIstream(&f)) ADD_FAILURE() << "cannot parse " << modelPath;
  std::vector<std::string> names;
  for (const auto &vi : m.graph().input()) names.push_back(vi.name());
  return names;
}

void runCase(const std::string &name) {
  std::string dir = caseRoot() + "/" + name, data = dir + "/test_data_set_0/";
  std::vector<std::string> names = inputNames(dir + "/model.onnx");
  frontend::ImportOptions opts;
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < names.size(); ++i) {
    auto t = frontend::readTensorFile(data + "input_" + std::to_string(i) + ".pb");
    ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
    opts.inputShapes[names[i]] = t->shape(); // fed at run time, not a data-less weight
    feeds[names[i]] = *t;
  }
  auto g = frontend::importOnnx(dir + "/model.onnx", opts);
  ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
  ir::Graph &graph = **g;
  if (llvm::Error e = passes::runPipeline(graph, passes::importPipeline(), {})) FAIL() << llvm::toString(std::move(e));
  auto outs = ir::runGraph(graph, feeds);
  ASSERT_TRUE(bool(outs)) << llvm::toString(outs.takeError());
  for (size_t i = 0; i < outs->size(); ++i) {
    auto want = frontend::readTensorFile(data + "output_" + std::to_string(i) + ".pb");
    ASSERT_TRUE(bool(want)) << llvm::toString(want.takeError());
    const Tensor &got = (*outs)[i];
    ASSERT_EQ(got.dtype(), want->dtype()) << "output " << i;
    ASSERT_EQ(got.shape(), want->shape()) << "output " << i;
    for (int64_t k = 0; k < got.numel(); ++k) {
      double a = got.getAsDouble(k), b = want->getAsDouble(k);
      if (std::isinf(b))
        EXPECT_EQ(a, b) << "output " << i << " element " << k;
      else
        EXPECT_NEAR(a, b, 1e-5 * (1 + std::fabs(b))) << "output " << i << " element " << k;
    }
  }
}

TEST(NNOpReferenceCases, AllMatchOnnxReference) {
  std::vector<std::string> names = caseNames();
  ASSERT_GE(names.size(), 7u) << "test data missing in " << caseRoot();
  for (const std::string &n : names) {
    SCOPED_TRACE(n);
    runCase(n);
  }
}

} // namespace
