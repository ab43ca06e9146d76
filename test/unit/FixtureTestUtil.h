#pragma once
// Helpers for end-to-end tests against the PyTorch reference fixtures in
// test/data/<model>/ (see test/data/README.md).
#include "codegen/Compile.h"
#include "frontend/OnnxImport.h"
#include "frontend/TensorProto.h"
#include "ir/Eval.h"
#include "ir/Graph.h"
#include "passes/Pass.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>

namespace megac::testing {

inline std::string fixtureDir(const std::string &model) { return std::string(MEGAC_TEST_DATA) + "/" + model; }

inline Tensor loadRef(const std::string &model, const std::string &file) {
  auto t = frontend::readTensorFile(fixtureDir(model) + "/ref/" + file);
  if (!t) {
    ADD_FAILURE() << llvm::toString(t.takeError());
    return Tensor();
  }
  return *t;
}

// ||a - b|| / ||b|| over all elements (as doubles).
inline double relativeError(const Tensor &a, const Tensor &b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    double d = a.getAsDouble(i) - b.getAsDouble(i);
    num += d * d;
    den += b.getAsDouble(i) * b.getAsDouble(i);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

inline std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// An integer field of meta.json ("params": 125248).
inline int64_t metaInt(const std::string &model, const std::string &key) {
  std::string s = readFile(fixtureDir(model) + "/meta.json");
  std::smatch m;
  if (!std::regex_search(s, m, std::regex("\"" + key + "\"\\s*:\\s*(-?[0-9]+)"))) return -1;
  return std::stoll(m[1]);
}

// Imports a fixture at the given input shape and runs `pipeline` (default:
// the import pipeline).
inline std::unique_ptr<ir::Graph> importFixture(const std::string &model, const Shape &inputShape,
                                                const std::vector<std::string> &pipeline = passes::importPipeline()) {
  frontend::ImportOptions opts;
  opts.firstInputShape = inputShape;
  auto g = frontend::importOnnx(fixtureDir(model) + "/model.onnx", opts);
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError());
    return nullptr;
  }
  if (auto e = passes::runPipeline(**g, pipeline, {})) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return nullptr;
  }
  return std::move(*g);
}

// The fixture's number of layers from its meta.json (Llama or GPT-2 naming).
inline int64_t layersOf(const std::string &model) {
  int64_t n = metaInt(model, "num_hidden_layers");
  return n >= 0 ? n : metaInt(model, "n_layer");
}

// max |a - b| / max |b| (NaN in one and not the other: infinity).
inline double maxRelativeDiff(const Tensor &a, const Tensor &b) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    double x = a.getAsDouble(i), y = b.getAsDouble(i);
    if (std::isnan(x) != std::isnan(y)) return INFINITY;
    if (!std::isnan(y)) diff = std::max(diff, std::fabs(x - y)), scale = std::max(scale, std::fabs(y));
  }
  return diff / std::max(scale, 1e-30);
}

// Runs both graphs on the same N(0, 1.5) float inputs (the inputs of
// `before`) and expects every output within `tol` (maxRelativeDiff): a
// rewrite keeps the values.
inline void expectSameValuesOnRandomInputs(ir::Graph &before, ir::Graph &after, unsigned seed, double tol) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::map<std::string, Tensor> feeds;
  for (ir::ValueId in : before.inputs) {
    const ir::Value &v = before.value(in);
    Tensor t(DType::F32, v.type.shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
    feeds[v.name] = t;
  }
  auto want = ir::runGraph(before, feeds);
  auto got = ir::runGraph(after, feeds);
  ASSERT_TRUE(bool(want)) << llvm::toString(want.takeError());
  ASSERT_TRUE(bool(got)) << llvm::toString(got.takeError());
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < want->size(); ++i) {
    ASSERT_EQ((*got)[i].shape(), (*want)[i].shape());
    EXPECT_LT(maxRelativeDiff((*got)[i], (*want)[i]), tol) << "output " << i;
  }
}

// Compiles a fixture at the reference batch (2 x 16) with the fixtures'
// optimizer: AdamW(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1).
inline plan::Plan compileFixturePlan(const std::string &model, const std::string &compute = "bf16",
                                     codegen::Recompute recompute = codegen::Recompute::All) {
  frontend::ImportOptions io;
  io.batch = 2;
  io.seq = 16;
  codegen::CodegenOptions co;
  co.compute = compute;
  co.schedule.recompute = recompute;
  plan::Optimizer &o = co.optimizer;
  o.set_lr(1e-2f);
  o.set_beta1(0.9f);
  o.set_beta2(0.95f);
  o.set_eps(1e-8f);
  o.set_weight_decay(0.1f);
  o.set_schedule("constant");
  o.set_grad_accum(1);
  auto p = codegen::compileForTraining(fixtureDir(model) + "/model.onnx", io, {}, co);
  if (!p) {
    ADD_FAILURE() << llvm::toString(p.takeError());
    return {};
  }
  return *p;
}

// The fixture compiled for training at batch 2 x seq 16 with the default
// codegen options but these schedule options (slots, budgets, recompute).
inline plan::Plan compileFixtureScheduled(const std::string &model, const codegen::ScheduleOptions &schedule) {
  frontend::ImportOptions io;
  io.batch = 2;
  io.seq = 16;
  codegen::CodegenOptions co;
  co.schedule = schedule;
  auto p = codegen::compileForTraining(fixtureDir(model) + "/model.onnx", io, {}, co);
  if (!p) {
    ADD_FAILURE() << llvm::toString(p.takeError());
    return {};
  }
  return *p;
}

inline const char *const kFixtures[] = {"llama", "llama_noopt", "llama_sdpa", "llama_op23",
                                        "gpt2",  "gpt2_noopt",  "llama_small"};

} // namespace megac::testing
