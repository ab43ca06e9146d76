// Type inference of the shape family: shapes computed by hand from the ONNX
// spec, and the errors for invalid attributes and inputs.
#include "ShapeTestUtil.h"

#include "ir/ops/ShapeOps.h"

using namespace megac;
using namespace megac::ir;
using namespace megac::shapetest;

namespace {

// Infers `type` on an f32 input of shape `in` plus constant inputs; returns
// the first output's shape, or fails the test with the error.
Shape inferOn(const std::string &type, Shape in, std::vector<Tensor> consts, Attrs a = {}, int numOutputs = 1,
              std::vector<Shape> *all = nullptr) {
  GraphBuilder b;
  std::vector<ValueId> ins{b.input("x", DType::F32, std::move(in))};
  for (size_t i = 0; i < consts.size(); ++i)
    ins.push_back(consts[i].defined() ? b.constant("c" + std::to_string(i), consts[i]) : kNoValue);
  auto outs = b.op(type, ins, numOutputs, std::move(a));
  std::string err = b.inferLast();
  EXPECT_EQ(err, "") << type;
  if (!err.empty()) return {};
  if (all)
    for (ValueId o : outs) all->push_back(b.type(o).shape);
  EXPECT_EQ(b.type(outs[0]).dtype, DType::F32);
  return b.type(outs[0]).shape;
}

// The inference error for the same setup ("" if none).
std::string inferError(const std::string &type, Shape in, std::vector<Tensor> consts, Attrs a = {},
                       int numOutputs = 1) {
  GraphBuilder b;
  std::vector<ValueId> ins{b.input("x", DType::F32, std::move(in))};
  for (size_t i = 0; i < consts.size(); ++i)
    ins.push_back(consts[i].defined() ? b.constant("c" + std::to_string(i), consts[i]) : kNoValue);
  b.op(type, ins, numOutputs, std::move(a));
  return b.inferLast();
}

std::vector<int64_t> constOutput(const std::string &type, Shape in, Attrs a = {}) {
  GraphBuilder b;
  auto outs = b.op(type, {b.input("x", DType::F32, std::move(in))}, 1, std::move(a));
  EXPECT_EQ(b.inferLast(), "");
  const Value &v = b.g.value(outs[0]);
  EXPECT_EQ(v.kind, ValueKind::Const);
  return v.data ? v.data->toInt64Vector() : std::vector<int64_t>{-999};
}

} // namespace

TEST(ShapeOps, ShapeAndSizeAreConstants) {
  EXPECT_EQ(constOutput("Shape", {2, 3, 4, 5}), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(constOutput("Shape", {2, 3, 4, 5}, attrs({{"start", Attr::ofInt(-3)}, {"end", Attr::ofInt(-1)}})),
            (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(constOutput("Shape", {2, 3, 4, 5}, attrs({{"start", Attr::ofInt(-10)}, {"end", Attr::ofInt(2)}})),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(constOutput("Shape", {2, 3, 4, 5}, attrs({{"start", Attr::ofInt(3)}, {"end", Attr::ofInt(1)}})),
            (std::vector<int64_t>{}));
  EXPECT_EQ(constOutput("Shape", {2, 3}, attrs({{"start", Attr::ofInt(7)}})), (std::vector<int64_t>{}));
  EXPECT_EQ(constOutput("Size", {2, 3, 4}), (std::vector<int64_t>{24}));
  EXPECT_EQ(constOutput("Size", {}), (std::vector<int64_t>{1}));
}

TEST(ShapeOps, Reshape) {
  EXPECT_EQ(inferOn("Reshape", {2, 3, 4}, {i64v({0, -1})}), (Shape{2, 12}));
  EXPECT_EQ(inferOn("Reshape", {2, 3, 4}, {i64v({-1, 0, 2, 2})}), (Shape{2, 3, 2, 2}));
  EXPECT_EQ(inferOn("Reshape", {2, 3, 4}, {i64v({24})}), (Shape{24}));
  EXPECT_EQ(inferOn("Reshape", {0, 3}, {i64v({3, 0})}, attrs({{"allowzero", Attr::ofInt(1)}})), (Shape{3, 0}));
  // allowzero=0: 0 copies the input dim (here 0 too).
  EXPECT_EQ(inferOn("Reshape", {0, 3}, {i64v({0, 3})}), (Shape{0, 3}));
  EXPECT_NE(inferError("Reshape", {2, 3, 4}, {i64v({-1, -1})}).find("more than one -1"), std::string::npos);
  EXPECT_NE(inferError("Reshape", {2, 3, 4}, {i64v({5, -1})}).find("cannot be inferred"), std::string::npos);
  EXPECT_NE(inferError("Reshape", {2, 3, 4}, {i64v({25})}).find("cannot reshape"), std::string::npos);
  EXPECT_NE(inferError("Reshape", {2, 3}, {i64v({1, 1, 0})}).find("has no dim 2"), std::string::npos);
  EXPECT_NE(
      inferError("Reshape", {0, 3}, {i64v({0, -1})}, attrs({{"allowzero", Attr::ofInt(1)}})).find("both 0 and -1"),
      std::string::npos);
  EXPECT_NE(inferError("Reshape", {2, 3}, {i64v({-2, 3})}).find("invalid entry -2"), std::string::npos);
}

TEST(ShapeOps, ReshapeShapeMustBeConstant) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::F32, {2, 3});
  ValueId s = b.input("s", DType::I64, {2});
  b.op("Reshape", {x, s});
  std::string err = b.inferLast();
  EXPECT_NE(err.find("the shape) must be known at compile time"), std::string::npos) << err;
}

TEST(ShapeOps, Transpose) {
  EXPECT_EQ(inferOn("Transpose", {2, 3, 4}, {}), (Shape{4, 3, 2}));
  EXPECT_EQ(inferOn("Transpose", {2, 3, 4}, {}, attrs({{"perm", Attr::ofInts({1, 2, 0})}})), (Shape{3, 4, 2}));
  EXPECT_NE(inferError("Transpose", {2, 3, 4}, {}, attrs({{"perm", Attr::ofInts({0, 0, 1})}})).find("permutation"),
            std::string::npos);
  EXPECT_NE(inferError("Transpose", {2, 3}, {}, attrs({{"perm", Attr::ofInts({0})}})).find("rank 2"),
            std::string::npos);
}

TEST(ShapeOps, SqueezeUnsqueezeFlatten) {
  EXPECT_EQ(inferOn("Squeeze", {1, 3, 1, 4}, {}), (Shape{3, 4}));
  EXPECT_EQ(inferOn("Squeeze", {1, 3, 1, 4}, {i64v({-2})}), (Shape{1, 3, 4}));
  EXPECT_NE(inferError("Squeeze", {1, 3}, {i64v({1})}).find("its size is not 1"), std::string::npos);
  EXPECT_NE(inferError("Squeeze", {1, 1}, {i64v({0, -2})}).find("listed twice"), std::string::npos);
  EXPECT_EQ(inferOn("Unsqueeze", {3, 4}, {i64v({-1, 0})}), (Shape{1, 3, 4, 1}));
  EXPECT_EQ(inferOn("Unsqueeze", {3, 4}, {i64v({1, 3})}), (Shape{3, 1, 4, 1}));
  EXPECT_EQ(inferOn("Unsqueeze", {}, {i64v({0})}), (Shape{1}));
  EXPECT_NE(inferError("Unsqueeze", {3}, {i64v({2})}).find("out of range"), std::string::npos);
  EXPECT_EQ(inferOn("Flatten", {2, 3, 4}, {}), (Shape{2, 12}));
  EXPECT_EQ(inferOn("Flatten", {2, 3, 4}, {}, attrs({{"axis", Attr::ofInt(0)}})), (Shape{1, 24}));
  EXPECT_EQ(inferOn("Flatten", {2, 3, 4}, {}, attrs({{"axis", Attr::ofInt(3)}})), (Shape{24, 1}));
  EXPECT_EQ(inferOn("Flatten", {2, 3, 4}, {}, attrs({{"axis", Attr::ofInt(-1)}})), (Shape{6, 4}));
  EXPECT_NE(inferError("Flatten", {2, 3}, {}, attrs({{"axis", Attr::ofInt(3)}})).find("out of range"),
            std::string::npos);
}

TEST(ShapeOps, Concat) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::F32, {2, 1, 3}), y = b.input("y", DType::F32, {2, 4, 3});
  auto out = b.op("Concat", {x, y, x}, 1, attrs({{"axis", Attr::ofInt(-2)}}));
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(out[0]).shape, (Shape{2, 6, 3}));
  ValueId z = b.input("z", DType::F32, {3, 1, 3});
  b.op("Concat", {x, z}, 1, attrs({{"axis", Attr::ofInt(1)}}));
  EXPECT_NE(b.inferLast().find("differ outside axis 1"), std::string::npos);
  ValueId w = b.input("w", DType::I64, {2, 1, 3});
  b.op("Concat", {x, w}, 1, attrs({{"axis", Attr::ofInt(1)}}));
  EXPECT_NE(b.inferLast().find("is i64"), std::string::npos);
}

TEST(ShapeOps, Split) {
  std::vector<Shape> parts;
  inferOn("Split", {2, 5}, {i64v({2, 3})}, attrs({{"axis", Attr::ofInt(-1)}}), 2, &parts);
  EXPECT_EQ(parts, (std::vector<Shape>{{2, 2}, {2, 3}}));
  parts.clear();
  // num_outputs (opset 18): chunks of ceil(7 / 3) = 3, the last one smaller.
  inferOn("Split", {7, 2}, {}, attrs({{"num_outputs", Attr::ofInt(3)}}), 3, &parts);
  EXPECT_EQ(parts, (std::vector<Shape>{{3, 2}, {3, 2}, {1, 2}}));
  parts.clear();
  inferOn("Split", {6}, {}, {}, 3, &parts);
  EXPECT_EQ(parts, (std::vector<Shape>{{2}, {2}, {2}}));
  parts.clear();
  inferOn("Split", {3}, {i64v({0, 3, 0})}, {}, 3, &parts);
  EXPECT_EQ(parts, (std::vector<Shape>{{0}, {3}, {0}}));
  EXPECT_NE(inferError("Split", {5}, {i64v({2, 2})}, {}, 2).find("sums to 4"), std::string::npos);
  EXPECT_NE(inferError("Split", {5}, {i64v({5})}, {}, 2).find("1 sizes for 2 outputs"), std::string::npos);
  EXPECT_NE(inferError("Split", {6}, {}, attrs({{"num_outputs", Attr::ofInt(2)}}), 3).find("num_outputs is 2"),
            std::string::npos);
  EXPECT_NE(inferError("Split", {5}, {}, attrs({{"num_outputs", Attr::ofInt(4)}}), 4).find("cannot split"),
            std::string::npos);
}

TEST(ShapeOps, Slice) {
  // [5, 6]: axis 1 from 5 down past the front by 2 -> 5, 3, 1; axis 0 from 4 down to 1 -> 4.
  EXPECT_EQ(inferOn("Slice", {5, 6}, {i64v({-1, 4}), i64v({-1000, 0}), i64v({1, 0}), i64v({-2, -1})}), (Shape{4, 3}));
  EXPECT_EQ(inferOn("Slice", {5, 6}, {i64v({1}), i64v({INT64_MAX})}), (Shape{4, 6}));
  EXPECT_EQ(inferOn("Slice", {5, 6}, {i64v({-3}), i64v({-1}), i64v({-1})}), (Shape{5, 2}));
  EXPECT_EQ(inferOn("Slice", {5, 6}, {i64v({10}), i64v({20})}), (Shape{0, 6}));
  EXPECT_EQ(inferOn("Slice", {5, 6}, {i64v({3}), i64v({1})}), (Shape{0, 6}));
  EXPECT_EQ(inferOn("Slice", {5}, {i64v({0}), i64v({5}), Tensor(), i64v({3})}), (Shape{2}));
  EXPECT_EQ(inferOn("Slice", {5}, {i64v({INT64_MAX}), i64v({INT64_MIN}), Tensor(), i64v({-1})}), (Shape{5}));
  EXPECT_NE(inferError("Slice", {5}, {i64v({0}), i64v({5}), Tensor(), i64v({0})}).find("step"), std::string::npos);
  EXPECT_NE(inferError("Slice", {5, 6}, {i64v({0, 0}), i64v({1, 1}), i64v({1, -1})}).find("sliced twice"),
            std::string::npos);
  EXPECT_NE(inferError("Slice", {5, 6}, {i64v({0}), i64v({1, 1})}).find("ends has 2"), std::string::npos);
}

TEST(ShapeOps, GatherFamily) {
  GraphBuilder b;
  ValueId data = b.input("data", DType::F32, {3, 5, 2});
  ValueId idx = b.input("idx", DType::I32, {2, 4});
  auto g0 = b.op("Gather", {data, idx}, 1, attrs({{"axis", Attr::ofInt(-2)}}));
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(g0[0]).shape, (Shape{3, 2, 4, 2}));
  ValueId scalarIdx = b.input("s", DType::I64, {});
  auto g1 = b.op("Gather", {data, scalarIdx});
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(g1[0]).shape, (Shape{5, 2}));
  ValueId fidx = b.input("f", DType::F32, {2});
  b.op("Gather", {data, fidx});
  EXPECT_NE(b.inferLast().find("indices must be an integer tensor"), std::string::npos);

  ValueId ge = b.input("ge", DType::I64, {3, 1, 2});
  auto g2 = b.op("GatherElements", {data, ge}, 1, attrs({{"axis", Attr::ofInt(1)}}));
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(g2[0]).shape, (Shape{3, 1, 2}));

  // GatherND, batch_dims 1: indices [3, 4, 1] -> [3, 4] + data dims after 1 + 1 -> [3, 4, 2].
  ValueId nd = b.input("nd", DType::I64, {3, 4, 1});
  auto g3 = b.op("GatherND", {data, nd}, 1, attrs({{"batch_dims", Attr::ofInt(1)}}));
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(g3[0]).shape, (Shape{3, 4, 2}));
  ValueId nd2 = b.input("nd2", DType::I64, {4, 3});
  auto g4 = b.op("GatherND", {data, nd2});
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(g4[0]).shape, (Shape{4}));
  ValueId nd3 = b.input("nd3", DType::I64, {4, 4});
  b.op("GatherND", {data, nd3});
  EXPECT_NE(b.inferLast().find("last dim is 4"), std::string::npos);
}

TEST(ShapeOps, Scatters) {
  GraphBuilder b;
  ValueId data = b.input("data", DType::F32, {4, 3});
  ValueId idx = b.input("idx", DType::I64, {2, 1});
  ValueId upd = b.input("upd", DType::F32, {2, 3});
  auto s0 = b.op("ScatterND", {data, idx, upd}, 1, attrs({{"reduction", Attr::ofString("max")}}));
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(s0[0]).shape, (Shape{4, 3}));
  ValueId badUpd = b.input("bad", DType::F32, {2, 2});
  b.op("ScatterND", {data, idx, badUpd});
  EXPECT_NE(b.inferLast().find("must be f32[2,3]"), std::string::npos);
  b.op("ScatterND", {data, idx, upd}, 1, attrs({{"reduction", Attr::ofString("sum")}}));
  EXPECT_NE(b.inferLast().find("unknown reduction"), std::string::npos);
  ValueId ei = b.input("ei", DType::I64, {2, 2});
  ValueId eu = b.input("eu", DType::F32, {2, 2});
  auto s1 = b.op("ScatterElements", {data, ei, eu}, 1, attrs({{"axis", Attr::ofInt(-1)}}));
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(s1[0]).shape, (Shape{4, 3}));
}

TEST(ShapeOps, ExpandTilePad) {
  EXPECT_EQ(inferOn("Expand", {3, 1}, {i64v({2, 1, 4})}), (Shape{2, 3, 4}));
  EXPECT_EQ(inferOn("Expand", {2, 3}, {i64v({3})}), (Shape{2, 3}));
  EXPECT_NE(inferError("Expand", {2, 3}, {i64v({4})}).find("do not broadcast"), std::string::npos);
  EXPECT_EQ(inferOn("Tile", {2, 3}, {i64v({3, 0})}), (Shape{6, 0}));
  EXPECT_NE(inferError("Tile", {2, 3}, {i64v({3})}).find("1 entries"), std::string::npos);
  EXPECT_EQ(inferOn("Pad", {2, 3}, {i64v({1, 0, 2, 4})}), (Shape{5, 7}));
  // axes [-1, 0]: axis 2 gets begin 1, end 0; axis 0 begin -2 (crop), end 3.
  EXPECT_EQ(inferOn("Pad", {2, 3, 4}, {i64v({1, -2, 0, 3}), Tensor(), i64v({-1, 0})}), (Shape{3, 3, 5}));
  EXPECT_NE(inferError("Pad", {2, 3}, {i64v({1, 0, 2})}).find("expected 4"), std::string::npos);
  EXPECT_NE(inferError("Pad", {2, 3}, {i64v({0, -4, 0, 0})}).find("below zero"), std::string::npos);
  EXPECT_NE(inferError("Pad", {0, 3}, {i64v({1, 0, 0, 0})}, attrs({{"mode", Attr::ofString("reflect")}}))
                .find("empty"),
            std::string::npos);
  EXPECT_NE(inferError("Pad", {2}, {i64v({1, 1})}, attrs({{"mode", Attr::ofString("mirror")}})).find("unknown mode"),
            std::string::npos);
}

TEST(ShapeOps, Generators) {
  GraphBuilder b;
  auto r0 =
      b.op("Range", {b.constant("a", i64scalar(10)), b.constant("l", i64scalar(-3)), b.constant("d", i64scalar(-4))});
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(r0[0]), (TensorType{DType::I64, {4}, false})); // 10, 6, 2, -2
  auto r1 = b.op("Range", {b.constant("fa", f32s({}, {0.5f})), b.constant("fl", f32s({}, {2.0f})),
                           b.constant("fd", f32s({}, {0.5f}))});
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(r1[0]).shape, (Shape{3})); // 0.5, 1.0, 1.5
  b.op("Range", {b.constant("za", i64scalar(0)), b.constant("zl", i64scalar(3)), b.constant("zd", i64scalar(0))});
  EXPECT_NE(b.inferLast().find("delta is 0"), std::string::npos);

  Attrs intValue = attrs({{"value", Attr::ofTensor(i64s({1}, {7}))}});
  auto c0 = b.op("ConstantOfShape", {b.constant("s", i64v({2, 3}))}, 1, intValue);
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(c0[0]), (TensorType{DType::I64, {2, 3}, false}));
  auto c1 = b.op("ConstantOfShape", {b.constant("s0", i64v({}))});
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(c1[0]), (TensorType{DType::F32, {}, false}));

  ValueId x = b.input("x", DType::F32, {3, 4});
  auto cs = b.op("CumSum", {x, b.constant("ax", i64scalar(-1))});
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(cs[0]).shape, (Shape{3, 4}));
  b.op("CumSum", {x, b.constant("ax2", i64scalar(2))});
  EXPECT_NE(b.inferLast().find("out of range"), std::string::npos);
  ValueId v = b.input("v", DType::F32, {4});
  b.op("Trilu", {v});
  EXPECT_NE(b.inferLast().find("rank >= 2"), std::string::npos);
}

TEST(ShapeOps, OneHot) {
  GraphBuilder b;
  ValueId idx = b.input("i", DType::I64, {2, 3});
  ValueId vals = b.constant("v", i64v({0, 1}));
  auto o0 = b.op("OneHot", {idx, b.constant("d", f32s({}, {5.0f})), vals});
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(o0[0]), (TensorType{DType::I64, {2, 3, 5}, false}));
  auto o1 = b.op("OneHot", {idx, b.constant("d1", i64scalar(4)), vals}, 1, attrs({{"axis", Attr::ofInt(-3)}}));
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(o1[0]).shape, (Shape{4, 2, 3}));
}

TEST(ShapeOps, SequenceTypesLookThroughSplitToSequence) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::F32, {2, 10, 6});
  auto seq = b.op("SplitToSequence", {x, b.constant("chunk", i64scalar(4))}, 1, attrs({{"axis", Attr::ofInt(1)}}));
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_TRUE(b.type(seq[0]).isSequence);
  EXPECT_EQ(b.type(seq[0]).dtype, DType::F32);
  auto last = b.op("SequenceAt", {seq[0], b.constant("pm1", i64scalar(-1))});
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(last[0]), (TensorType{DType::F32, {2, 2, 6}, false}));
  auto first = b.op("SequenceAt", {seq[0], b.constant("p0", Tensor::fromVector<int32_t>(DType::I32, {}, {0}))});
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(first[0]).shape, (Shape{2, 4, 6}));
  b.op("SequenceAt", {seq[0], b.constant("p3", i64scalar(3))});
  EXPECT_NE(b.inferLast().find("position 3 is out of range for a sequence of 3"), std::string::npos);
  auto len = b.op("SequenceLength", {seq[0]});
  EXPECT_EQ(b.inferLast(), "");
  ASSERT_TRUE(b.g.value(len[0]).data.has_value());
  EXPECT_EQ(b.g.value(len[0]).data->toInt64Vector(), (std::vector<int64_t>{3}));

  // keepdims=0 without split drops the axis from each element.
  auto unbind = b.op("SplitToSequence", {x}, 1, attrs({{"axis", Attr::ofInt(-1)}, {"keepdims", Attr::ofInt(0)}}));
  EXPECT_EQ(b.inferLast(), "");
  auto e5 = b.op("SequenceAt", {unbind[0], b.constant("p5", i64scalar(5))});
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(e5[0]).shape, (Shape{2, 10}));
  // An explicit split ignores keepdims.
  auto parts = b.op("SplitToSequence", {x, b.constant("sp", i64v({7, 3}))}, 1,
                    attrs({{"axis", Attr::ofInt(1)}, {"keepdims", Attr::ofInt(0)}}));
  EXPECT_EQ(b.inferLast(), "");
  auto p1 = b.op("SequenceAt", {parts[0], b.constant("q1", i64scalar(1))});
  EXPECT_EQ(b.inferLast(), "");
  EXPECT_EQ(b.type(p1[0]).shape, (Shape{2, 3, 6}));
  b.op("SplitToSequence", {x, b.constant("bad", i64v({7, 4}))}, 1, attrs({{"axis", Attr::ofInt(1)}}));
  EXPECT_NE(b.inferLast().find("sums to 11"), std::string::npos);
  // A sequence that is not a tensor input elsewhere.
  b.op("Reshape", {seq[0], b.constant("shape", i64v({-1}))});
  EXPECT_NE(b.inferLast().find("is a sequence"), std::string::npos);
}
