// lower-sequences: the lowered graph computes what SplitToSequence +
// SequenceAt mean (checked against slices taken by hand), keeps no sequence
// op, and rejects uses it cannot lower with an error naming the node.
#include "ShapeTestUtil.h"

#include "ir/Eval.h"
#include "passes/Pass.h"

using namespace megac;
using namespace megac::ir;
using namespace megac::shapetest;

namespace {

llvm::Error lower(Graph &g) {
  return passes::runPipeline(g, {"specialize", "lower-sequences", "specialize", "dce"}, passes::PassOptions());
}

std::string errorOf(llvm::Error e) { return e ? llvm::toString(std::move(e)) : ""; }

bool hasSequenceOps(const Graph &g) {
  for (const Op &op : g.ops)
    if (op.type == "SplitToSequence" || op.type == "SequenceAt" || op.type == "SequenceLength") return true;
  return false;
}

// x[:, begin:end, :] of a [a, b, c] tensor.
std::vector<double> sliceAxis1(const Tensor &x, int64_t begin, int64_t end) {
  std::vector<double> r;
  for (int64_t i = 0; i < x.dim(0); ++i)
    for (int64_t j = begin; j < end; ++j)
      for (int64_t k = 0; k < x.dim(2); ++k) r.push_back(x.getAsDouble((i * x.dim(1) + j) * x.dim(2) + k));
  return r;
}

} // namespace

TEST(LowerSequences, ChunkedSplitRunsLikeSlices) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::F32, {2, 10, 6});
  ValueId seq =
      b.op("SplitToSequence", {x, b.constant("chunk", i64scalar(4))}, 1, attrs({{"axis", Attr::ofInt(-2)}}))[0];
  ValueId last = b.op("SequenceAt", {seq, b.constant("pm1", i64scalar(-1))})[0];
  ValueId first = b.op("SequenceAt", {seq, b.constant("p0", i64scalar(0))})[0];
  ValueId firstAgain = b.op("SequenceAt", {seq, b.constant("pm3", i64scalar(-3))})[0];
  ValueId len = b.op("SequenceLength", {seq})[0];
  b.g.outputs = {last, first, firstAgain, len};
  ASSERT_EQ(errorOf(lower(b.g)), "");
  EXPECT_FALSE(hasSequenceOps(b.g));
  int splits = 0;
  for (const Op &op : b.g.ops) splits += op.type == "Split";
  EXPECT_EQ(splits, 1);

  Tensor xv = randomTensor({2, 10, 6}, 21);
  auto outs = runGraph(b.g, {{"x", xv}});
  ASSERT_TRUE(bool(outs)) << llvm::toString(outs.takeError());
  ASSERT_EQ(outs->size(), 4u);
  EXPECT_EQ((*outs)[0].shape(), (Shape{2, 2, 6}));
  EXPECT_EQ(values((*outs)[0]), sliceAxis1(xv, 8, 10));
  EXPECT_EQ(values((*outs)[1]), sliceAxis1(xv, 0, 4));
  EXPECT_EQ(values((*outs)[2]), sliceAxis1(xv, 0, 4));
  EXPECT_EQ(values((*outs)[3]), std::vector<double>{3});
}

TEST(LowerSequences, UnbindWithoutKeepdimsSqueezesTheAxis) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::F32, {2, 3, 4});
  ValueId seq = b.op("SplitToSequence", {x}, 1, attrs({{"axis", Attr::ofInt(1)}, {"keepdims", Attr::ofInt(0)}}))[0];
  ValueId mid = b.op("SequenceAt", {seq, b.constant("p1", i64scalar(1))})[0];
  b.g.outputs = {mid};
  ASSERT_EQ(errorOf(lower(b.g)), "");
  EXPECT_FALSE(hasSequenceOps(b.g));
  EXPECT_EQ(b.g.type(b.g.outputs[0]), (TensorType{DType::F32, {2, 4}, false}));
  Tensor xv = randomTensor({2, 3, 4}, 22);
  auto outs = runGraph(b.g, {{"x", xv}});
  ASSERT_TRUE(bool(outs)) << llvm::toString(outs.takeError());
  EXPECT_EQ(values((*outs)[0]), sliceAxis1(xv, 1, 2));
}

TEST(LowerSequences, ExplicitSizesAndConstantInputFold) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::F32, {1});
  ValueId c = b.constant("c", iota(DType::F32, {1, 5, 1}));
  ValueId seq =
      b.op("SplitToSequence", {c, b.constant("sizes", i64v({1, 4}))}, 1, attrs({{"axis", Attr::ofInt(1)}}))[0];
  ValueId tail = b.op("SequenceAt", {seq, b.constant("p1", i64scalar(1))})[0];
  b.g.outputs = {tail, x};
  ASSERT_EQ(errorOf(lower(b.g)), "");
  // The Split of a constant folds away entirely.
  EXPECT_TRUE(b.g.ops.empty());
  const Value &v = b.g.value(b.g.outputs[0]);
  ASSERT_TRUE(v.data.has_value());
  EXPECT_EQ(values(*v.data), (std::vector<double>{1, 2, 3, 4}));
}

TEST(LowerSequences, UnsupportedUsesNameTheNode) {
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::F32, {4});
    ValueId seq = b.op("SplitToSequence", {x})[0];
    b.g.outputs = {seq};
    std::string err = errorOf(lower(b.g));
    EXPECT_NE(err.find("node 'SplitToSequence_0'"), std::string::npos) << err;
    EXPECT_NE(err.find("is a graph output"), std::string::npos) << err;
  }
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::F32, {4});
    ValueId seq = b.op("SplitToSequence", {x})[0];
    ValueId pos = b.input("pos", DType::I64, {});
    b.g.outputs = {b.op("SequenceAt", {seq, pos})[0]};
    // specialize already needs the position.
    std::string err = errorOf(lower(b.g));
    EXPECT_NE(err.find("node 'SequenceAt_1'"), std::string::npos) << err;
    EXPECT_NE(err.find("position) must be known at compile time"), std::string::npos) << err;
    // lower-sequences alone says the same in its own words.
    err = errorOf(passes::runPass(b.g, "lower-sequences", passes::PassOptions()));
    EXPECT_NE(err.find("node 'SequenceAt_1'"), std::string::npos) << err;
    EXPECT_NE(err.find("known at compile time"), std::string::npos) << err;
  }
  {
    GraphBuilder b;
    ValueId x = b.input("x", DType::F32, {4});
    ValueId seq = b.op("SplitToSequence", {x})[0];
    ValueId bad = b.op("Concat", {seq}, 1, attrs({{"axis", Attr::ofInt(0)}}))[0];
    b.g.outputs = {bad};
    std::string err = errorOf(passes::runPass(b.g, "lower-sequences", passes::PassOptions()));
    EXPECT_NE(err.find("node 'Concat_1'"), std::string::npos) << err;
    EXPECT_NE(err.find("uses sequence"), std::string::npos) << err;
  }
}
