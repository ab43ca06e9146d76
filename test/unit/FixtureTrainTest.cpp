// End to end against PyTorch: the plan's loss, every parameter's gradient
// (mapped to PyTorch names through meta.json's initializer_map), and the
// five-step AdamW trajectory; and exact resumption from a checkpoint.
#include "FixtureTestUtil.h"

#include "driver/Compile.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/TrainLoop.h"
#include "runtime/train/Weights.h"

#include "llvm/Support/FileSystem.h"

using namespace megac;
using namespace megac::testing;

namespace {

struct MapEntry {
  std::string torchName;
  bool transposed;
};

std::map<std::string, MapEntry> initializerMap(const std::string &model) {
  std::string s = readFile(fixtureDir(model) + "/meta.json");
  std::map<std::string, MapEntry> m;
  std::regex re("\"([^\"]+)\":\\s*\\{\\s*\"param\":\\s*\"([^\"]+)\",\\s*\"transposed\":\\s*(true|false)\\s*\\}");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), re); it != std::sregex_iterator(); ++it)
    m[(*it)[1]] = {(*it)[2], (*it)[3] == "true"};
  return m;
}

plan::Plan compileFixture(const std::string &model) { return compileFixturePlan(model); }

std::unique_ptr<runtime::Trainer> makeTrainer(const plan::Plan &p) {
  int64_t initialized = -1;
  auto t = withWeights(runtime::Trainer::create(p), p, &initialized);
  if (t) EXPECT_EQ(initialized, 0);
  return t;
}

Tensor transpose2d(const Tensor &t) {
  Tensor r(t.dtype(), {t.dim(1), t.dim(0)});
  for (int64_t i = 0; i < t.dim(0); ++i)
    for (int64_t j = 0; j < t.dim(1); ++j) r.data<float>()[j * t.dim(0) + i] = t.data<float>()[i * t.dim(1) + j];
  return r;
}

} // namespace

class FixtureTrain : public ::testing::TestWithParam<const char *> {};

TEST_P(FixtureTrain, LossAndGradientsMatchPyTorch) {
  std::string model = GetParam();
  plan::Plan p = compileFixture(model);
  ASSERT_GT(p.units_size(), 0);
  auto trainer = makeTrainer(p);
  ASSERT_TRUE(trainer);
  Tensor ids = loadRef(model, "input_ids.pb"), targets = loadRef(model, "targets.pb");
  std::vector<float> grads(size_t(trainer->hostParamElements()), 0.0f);
  auto loss = trainer->forwardBackward(ids, targets, 1.0f, &grads, 0.0f);
  ASSERT_TRUE(bool(loss)) << llvm::toString(loss.takeError());
  double refLoss = loadRef(model, "loss.pb").getAsDouble(0);
  EXPECT_LT(std::abs(*loss - refLoss) / std::abs(refLoss), 1e-5) << model << ": loss " << *loss << " vs " << refLoss;

  auto map = initializerMap(model);
  ASSERT_FALSE(map.empty()) << model << ": meta.json has no initializer_map";
  int checked = 0;
  for (const plan::Parameter &pp : p.parameters()) {
    auto it = map.find(pp.name());
    ASSERT_NE(it, map.end()) << model << ": parameter " << pp.name() << " is not a PyTorch parameter";
    Tensor ref = loadRef(model, "grad/" + it->second.torchName + ".pb");
    Tensor g(DType::F32, Shape(pp.type().shape().begin(), pp.type().shape().end()));
    std::memcpy(g.raw(), grads.data() + pp.host_offset(), size_t(pp.numel()) * 4);
    if (it->second.transposed) g = transpose2d(g);
    ASSERT_EQ(g.shape(), ref.shape()) << pp.name();
    double err = relativeError(g, ref);
    EXPECT_LT(err, 1e-4) << model << ": gradient of " << pp.name() << " (" << it->second.torchName << ") off by " << err;
    ++checked;
  }
  EXPECT_EQ(checked, p.parameters_size());
}

TEST_P(FixtureTrain, AdamWTrajectoryMatchesPyTorch) {
  std::string model = GetParam();
  plan::Plan p = compileFixture(model);
  auto trainer = makeTrainer(p);
  ASSERT_TRUE(trainer);
  Tensor ids = loadRef(model, "input_ids.pb"), targets = loadRef(model, "targets.pb");
  Tensor ref = loadRef(model, "losses_adamw.pb");
  for (int64_t s = 0; s < ref.numel(); ++s) {
    auto st = trainer->step({{ids, targets}}, 1e-2f);
    ASSERT_TRUE(bool(st)) << llvm::toString(st.takeError());
    EXPECT_NEAR(st->loss, ref.getAsDouble(s), 5e-4) << model << " step " << s + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTrain, ::testing::ValuesIn(kFixtures));

// gpt2 ties the head to wte: one parameter, used by two units, trained once.
TEST(FixtureTrainTied, Gpt2HeadAndEmbeddingShareOneParameter) {
  plan::Plan p = compileFixture("gpt2");
  int shared = 0;
  for (const plan::Parameter &pp : p.parameters())
    if (pp.units_size() == 2) {
      ++shared;
      EXPECT_EQ(pp.type().shape(0), 256); // vocab x hidden
    }
  EXPECT_EQ(shared, 1);
  EXPECT_EQ(p.total_parameters(), metaInt("gpt2", "params"));
}

// Ten straight steps equal five steps, a checkpoint, a resume and five more,
// bit for bit.
TEST(FixtureTrainResume, TenStepsEqualFivePlusResumePlusFive) {
  plan::Plan p = compileFixture("llama");
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("megac-resume", dir));
  std::string text = std::string(dir) + "/data.txt";
  writeTrainingText(text);
  auto run = [&](int64_t steps, const std::string &ckpt, const std::string &resume) {
    auto t = runtime::Trainer::create(p);
    EXPECT_TRUE(bool(t));
    std::vector<double> losses = trainOnText(**t, text, steps, ckpt, resume);
    return std::make_pair(std::move(*t), losses);
  };
  auto [straight, lossesA] = run(10, "", "");
  std::string ck = std::string(dir) + "/ck";
  auto [first, lossesB1] = run(5, ck, "");
  auto [second, lossesB2] = run(10, "", ck);
  ASSERT_EQ(lossesA.size(), 10u);
  ASSERT_EQ(lossesB1.size() + lossesB2.size(), 10u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(lossesA[i], lossesB1[i]);
    EXPECT_EQ(lossesA[5 + i], lossesB2[i]);
  }
  const auto &a = straight->state(), &b = second->state();
  EXPECT_EQ(a.step, b.step);
  EXPECT_TRUE(a.params == b.params);
  EXPECT_TRUE(a.m == b.m);
  EXPECT_TRUE(a.v == b.v);
  llvm::sys::fs::remove_directories(dir);
}
