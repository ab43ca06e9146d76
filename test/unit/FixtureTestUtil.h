#pragma once
// Helpers for end-to-end tests against the PyTorch reference fixtures in
// test/data/<model>/ (see test/data/README.md).
#include "driver/Compile.h"
#include "frontend/OnnxImport.h"
#include "frontend/TensorProto.h"
#include "ir/Eval.h"
#include "ir/Graph.h"
#include "passes/Pass.h"
#include "runtime/train/TrainLoop.h"
#include "runtime/train/Trainer.h"
#include "runtime/train/Weights.h"
#include "runtime/weights/WeightFiles.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

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

// Compiles a fixture for training at batch 2 x `seq` with these options.
inline plan::Plan compileFixtureWith(const std::string &model, int64_t seq, const codegen::CodegenOptions &co) {
  frontend::ImportOptions io;
  io.batch = 2;
  io.seq = seq;
  auto p = driver::compileForTraining(fixtureDir(model) + "/model.onnx", io, {}, co);
  if (!p) {
    ADD_FAILURE() << llvm::toString(p.takeError());
    return {};
  }
  return *p;
}

// Compiles a fixture at the reference batch (2 x 16) with the fixtures'
// optimizer: AdamW(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1).
inline plan::Plan compileFixturePlan(const std::string &model, const std::string &compute = "bf16",
                                     codegen::Recompute recompute = codegen::Recompute::All, int64_t seq = 16,
                                     int residentUnits = 0, float clip = 0, int gpuAdamwUnits = 0,
                                     bool overlapSteps = true, int gradAccum = 1, int microBatchesPerPass = 1,
                                     int offloadCheckpoints = 0) {
  codegen::CodegenOptions co;
  co.compute = compute;
  co.schedule.recompute = recompute;
  co.schedule.residentUnits = residentUnits;
  co.schedule.gpuAdamwUnits = gpuAdamwUnits;
  co.schedule.overlapSteps = overlapSteps;
  co.schedule.microBatches = microBatchesPerPass;
  co.schedule.offloadCheckpoints = offloadCheckpoints;
  plan::Optimizer &o = co.optimizer; // plan::defaultOptimizer(): beta1 0.9, eps 1e-8, constant
  o.set_clip(clip);
  o.set_lr(1e-2f);
  o.set_beta2(0.95f);
  o.set_weight_decay(0.1f);
  o.set_grad_accum(gradAccum);
  return compileFixtureWith(model, seq, co);
}

// The fixture compiled for training at batch 2 x seq 16 with the default
// codegen options but these schedule options (slots, budgets, recompute).
inline plan::Plan compileFixtureScheduled(const std::string &model, const codegen::ScheduleOptions &schedule) {
  codegen::CodegenOptions co;
  co.schedule = schedule;
  return compileFixtureWith(model, 16, co);
}

// Tokens and targets of a fixed pattern (ids below 256, every fixture's
// vocabulary holds them) at batch 2 x `seq`: for lengths the references lack.
inline std::pair<Tensor, Tensor> patternBatch(int64_t seq) {
  std::vector<int64_t> ids(size_t(2 * seq)), next(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 37 + 11) % 256), next[i] = int64_t((i * 53 + 5) % 256);
  return {Tensor::fromVector(DType::I64, {2, seq}, ids), Tensor::fromVector(DType::I64, {2, seq}, next)};
}

// `n` micro-batches from the fixture's reference batch for accumulation
// tests: the k-th with its rows in the other order where k is odd, and its
// first k targets the ignore index (so that they weigh differently in the step).
inline std::vector<std::pair<Tensor, Tensor>> fixtureMicroBatches(const std::string &model, int64_t ignoreIndex, int n) {
  Tensor ids = loadRef(model, "input_ids.pb"), targets = loadRef(model, "targets.pb");
  std::vector<std::pair<Tensor, Tensor>> mbs{{ids, targets}};
  for (int k = 1; k < n; ++k) {
    Tensor ids2 = ids.clone(), tg2 = targets.clone();
    const size_t row = ids.nbytes() / size_t(ids.dim(0)), trow = targets.nbytes() / size_t(targets.dim(0));
    for (int64_t b = 0; k % 2 == 1 && b < ids.dim(0); ++b) {
      std::memcpy(static_cast<uint8_t *>(ids2.raw()) + size_t(b) * row,
                  static_cast<const uint8_t *>(ids.raw()) + size_t(ids.dim(0) - 1 - b) * row, row);
      std::memcpy(static_cast<uint8_t *>(tg2.raw()) + size_t(b) * trow,
                  static_cast<const uint8_t *>(targets.raw()) + size_t(targets.dim(0) - 1 - b) * trow, trow);
    }
    for (int64_t i = 0; k >= 2 && i < k && i < tg2.numel(); ++i) tg2.setFromDouble(i, double(ignoreIndex));
    mbs.push_back({ids2, tg2});
  }
  return mbs;
}

// ||a - b|| / ||b|| of one parameter's slice of two host-layout arrays.
inline double paramError(const std::vector<float> &a, const std::vector<float> &b, const plan::Parameter &p) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < p.numel(); ++i) {
    double x = a[size_t(p.host_offset() + i)], y = b[size_t(p.host_offset() + i)];
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// A reduced-precision gradient against the fp32 one, as bench/bf16_reference.py
// measures PyTorch's (ref/grad_error_bf16_autocast.pb): the mean over
// parameters of paramError, and the fraction of elements whose sign flips.
struct GradientError {
  double meanRelative = 0, flipFraction = 0;
};
inline GradientError gradientError(const std::vector<float> &test, const std::vector<float> &fp32,
                                   const plan::Plan &p) {
  GradientError e;
  for (const plan::Parameter &pp : p.parameters()) e.meanRelative += paramError(test, fp32, pp) / p.parameters_size();
  int64_t flips = 0;
  for (size_t i = 0; i < fp32.size(); ++i) flips += double(test[i]) * fp32[i] < 0;
  e.flipFraction = double(flips) / double(fp32.size());
  return e;
}

// Every weight moved one fp32 ulp up or down (a coin per element from
// `seed`): far below what fp32 training resolves, it re-rolls every bf16
// rounding (bench/bf16_reference.py nudges PyTorch's weights the same way).
inline void nudgeOneUlp(std::vector<float> &weights, unsigned seed) {
  std::mt19937 rng(seed);
  for (float &w : weights) w = std::nextafter(w, (rng() & 1) ? INFINITY : -INFINITY);
}

// max over the steps of |losses[row] - ref| for row `row` of a [runs, steps]
// tensor of loss trajectories (row 0 of a [steps] one).
inline double trajectoryDistance(const Tensor &losses, int64_t row, const Tensor &ref) {
  const int64_t steps = ref.numel();
  double d = 0;
  for (int64_t s = 0; s < steps; ++s) d = std::max(d, std::abs(losses.getAsDouble(row * steps + s) - ref.getAsDouble(s)));
  return d;
}

// The mean of trajectoryDistance over the rows of a [runs, steps] ensemble.
inline double meanTrajectoryDistance(const Tensor &ensemble, const Tensor &ref) {
  const int64_t runs = ensemble.shape()[0];
  double mean = 0;
  for (int64_t k = 0; k < runs; ++k) mean += trajectoryDistance(ensemble, k, ref) / double(runs);
  return mean;
}

// Trains `t` (the fixture's weights loaded), first nudged by `nudgeSeed`
// (0: not nudged), for as many AdamW steps at the fixtures' lr 1e-2 as `ref`
// has losses, on the fixture's batch; returns trajectoryDistance of its
// losses, which it appends to `losses` when given. Infinity on an error.
inline double trainedDistance(runtime::Trainer &t, const std::string &model, const Tensor &ref, unsigned nudgeSeed,
                              std::string *losses = nullptr) {
  if (nudgeSeed) nudgeOneUlp(t.state().params, nudgeSeed);
  Tensor ids = loadRef(model, "input_ids.pb"), targets = loadRef(model, "targets.pb");
  double worst = 0;
  for (int64_t s = 0; s < ref.numel(); ++s) {
    auto b = t.step({{ids, targets}}, 1e-2f);
    if (!b) {
      ADD_FAILURE() << model << ": " << llvm::toString(b.takeError());
      return INFINITY;
    }
    worst = std::max(worst, std::abs(b->loss - ref.getAsDouble(s)));
    if (losses) *losses += " " + std::to_string(b->loss).substr(0, 7);
  }
  return worst;
}

inline const char *const kFixtures[] = {"llama", "llama_noopt", "llama_sdpa", "llama_op23",
                                        "gpt2",  "gpt2_noopt",  "llama_small"};

// A trainer with the plan's initial weights loaded (`initialized`: how many
// parameters had no data and were initialized), or null after a test failure.
inline std::unique_ptr<runtime::Trainer> withWeights(llvm::Expected<std::unique_ptr<runtime::Trainer>> t,
                                                     const plan::Plan &p, int64_t *initialized = nullptr) {
  if (!t) {
    ADD_FAILURE() << llvm::toString(t.takeError());
    return nullptr;
  }
  auto n = runtime::loadInitialWeights(p, (*t)->state(), {}, runtime::fileWeightReaders());
  if (!n) {
    ADD_FAILURE() << llvm::toString(n.takeError());
    return nullptr;
  }
  if (initialized) *initialized = n->initialized;
  return std::move(*t);
}

// A small text to train on (bytes as tokens), written to `path`.
inline void writeTrainingText(const std::string &path) {
  std::ofstream f(path);
  for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps over the lazy dog " << i << "\n";
}

// runTraining on a text file (seed 7, quiet): to `steps`, checkpointing into
// `ckpt` every `every` steps (and at the end) where given, resuming from
// `resume` where given. The losses of the steps run.
inline std::vector<double> trainOnText(runtime::Trainer &t, const std::string &text, int64_t steps,
                                       const std::string &ckpt = "", const std::string &resume = "",
                                       int64_t every = 0) {
  runtime::TrainLoopOptions lo;
  lo.steps = steps;
  lo.text = text;
  lo.seed = 7;
  lo.quiet = true;
  lo.checkpointDir = ckpt;
  lo.checkpointEvery = every;
  lo.resume = resume;
  lo.readers = runtime::fileWeightReaders();
  auto losses = runtime::runTraining(t, lo);
  EXPECT_TRUE(bool(losses)) << (losses ? "" : llvm::toString(losses.takeError()));
  return losses ? *losses : std::vector<double>{};
}

} // namespace megac::testing
