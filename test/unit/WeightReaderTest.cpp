// The runtime reads initial weights only through the readers its caller
// passes (runtime/train/WeightReader.h): an in-memory reader injected here is
// what loadInitialWeights reads, for --weights and for the plan's own model,
// and no reader given is an error rather than a file the runtime opens.
#include "runtime/train/WeightReader.h"
#include "runtime/train/Weights.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

using namespace megac;
using namespace megac::runtime;

namespace {

// Tensors held in memory, read by name: no file, no format.
class MemoryReader : public WeightReader {
public:
  std::vector<std::vector<float>> values;
  int *reads = nullptr; // counts tensors read, where given (the loader destroys the reader when done)
  explicit MemoryReader(const std::map<std::string, std::vector<float>> &t, int *readCount = nullptr) : reads(readCount) {
    given = "memory";
    for (const auto &[name, v] : t) {
      SourceTensor s;
      s.name = name;
      s.shape = {int64_t(v.size())};
      s.numel = int64_t(v.size());
      tensors.push_back(s);
      values.push_back(v);
    }
  }
  std::string describe() const override { return "in-memory test weights"; }
  llvm::Error read(std::vector<std::pair<int32_t, float *>> wanted, WeightReadStats &stats) override {
    for (const auto &[i, dst] : wanted) {
      std::memcpy(dst, values[size_t(i)].data(), values[size_t(i)].size() * 4);
      stats.bytes += int64_t(values[size_t(i)].size()) * 4;
      if (reads) ++*reads;
    }
    return llvm::Error::success();
  }
};

// A plan of two parameters (3 and 2 floats) and nothing else: all
// loadInitialWeights reads of a plan.
plan::Plan twoParameters() {
  plan::Plan p;
  p.set_model_path("/nonexistent/model.onnx"); // never opened: the readers are the test's
  int64_t offset = 0;
  for (auto [name, n] : {std::pair<const char *, int64_t>{"w", 3}, {"b", 2}}) {
    plan::Parameter *q = p.add_parameters();
    q->set_name(name);
    q->mutable_type()->add_shape(n);
    q->set_numel(n);
    q->set_host_offset(offset);
    offset += n;
  }
  return p;
}

const std::map<std::string, std::vector<float>> kWeights = {{"w", {1, 2, 3}}, {"b", {-4, 5}}};

TEST(WeightReader, InjectedReaderSuppliesWeights) {
  const plan::Plan p = twoParameters();
  HostState state;
  state.params.assign(5, 0.0f);
  bool opened = false;
  int reads = 0;
  WeightReaders readers;
  readers.openWeights = [&](const std::string &path) -> llvm::Expected<std::unique_ptr<WeightReader>> {
    EXPECT_EQ(path, "pretrained");
    opened = true;
    return std::unique_ptr<WeightReader>(std::make_unique<MemoryReader>(kWeights, &reads));
  };
  WeightOptions opts;
  opts.weightsPath = "pretrained";
  auto loaded = loadInitialWeights(p, state, opts, readers);
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  ASSERT_TRUE(opened);
  EXPECT_EQ(reads, 2);
  EXPECT_EQ(state.params, (std::vector<float>{1, 2, 3, -4, 5}));
  EXPECT_EQ(loaded->report.front(), "weights: pretrained (in-memory test weights)");
}

TEST(WeightReader, InjectedModelReaderSuppliesThePlansWeights) {
  const plan::Plan p = twoParameters(); // weights_hash 0: no hash of the values to match
  HostState state;
  state.params.assign(5, 0.0f);
  WeightReaders readers;
  readers.openModel = [&](const plan::Plan &plan, bool allowUnreadable) -> llvm::Expected<std::unique_ptr<WeightReader>> {
    EXPECT_EQ(&plan, &p);
    EXPECT_FALSE(allowUnreadable);
    return std::unique_ptr<WeightReader>(std::make_unique<MemoryReader>(kWeights));
  };
  auto loaded = loadInitialWeights(p, state, {}, readers);
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_EQ(state.params, (std::vector<float>{1, 2, 3, -4, 5}));

  // A weight the model's reader lacks is one without data: --init initializes it.
  readers.openModel = [](const plan::Plan &, bool) -> llvm::Expected<std::unique_ptr<WeightReader>> {
    return std::unique_ptr<WeightReader>(std::make_unique<MemoryReader>(std::map<std::string, std::vector<float>>{{"w", {7, 8, 9}}}));
  };
  auto missing = loadInitialWeights(p, state, {}, readers);
  ASSERT_FALSE(bool(missing));
  EXPECT_NE(llvm::toString(missing.takeError()).find("parameter 'b' has no data"), std::string::npos);
}

TEST(WeightReader, NoReaderGivenIsAnError) {
  const plan::Plan p = twoParameters();
  HostState state;
  state.params.assign(5, 0.0f);
  auto model = loadInitialWeights(p, state, {}, {});
  ASSERT_FALSE(bool(model));
  EXPECT_EQ(llvm::toString(model.takeError()), "no model reader was given to the runtime");
  WeightOptions opts;
  opts.weightsPath = "pretrained";
  auto weights = loadInitialWeights(p, state, opts, {});
  ASSERT_FALSE(bool(weights));
  EXPECT_EQ(llvm::toString(weights.takeError()), "--weights: no weights reader was given to the runtime");
}

} // namespace
