// CPU kernels of the shape family against hand-computed values (the ONNX
// spec's examples) and naive per-element references on random inputs.
#include "ShapeTestUtil.h"

#include <algorithm>
#include <numeric>

using namespace megac;
using namespace megac::shapetest;

namespace {

std::vector<int64_t> unravel(int64_t i, const Shape &s) {
  std::vector<int64_t> c(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    c[d] = i % s[d];
    i /= s[d];
  }
  return c;
}

int64_t ravel(const std::vector<int64_t> &c, const Shape &s) {
  int64_t i = 0;
  for (size_t d = 0; d < s.size(); ++d) i = i * s[d] + c[d];
  return i;
}

std::vector<double> dv(std::initializer_list<double> v) { return v; }

} // namespace

TEST(ShapeKernels, TransposeEveryPermutationMatchesNaive) {
  Shape in{2, 3, 4, 5};
  Tensor x = randomTensor(in, 1);
  std::vector<int64_t> perm{0, 1, 2, 3};
  do {
    Shape out;
    for (int64_t p : perm) out.push_back(in[size_t(p)]);
    Tensor y = run1("Transpose", {&x}, DType::F32, out, attrs({{"perm", Attr::ofInts(perm)}}));
    for (int64_t i = 0; i < y.numel(); ++i) {
      auto oc = unravel(i, out);
      std::vector<int64_t> ic(4);
      for (size_t d = 0; d < 4; ++d) ic[size_t(perm[d])] = oc[d];
      ASSERT_EQ(y.getAsDouble(i), x.getAsDouble(ravel(ic, in))) << "perm " << shapeToString(perm);
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
}

// Dims of 16 and more take the tiled path; odd sizes leave partial tiles.
TEST(ShapeKernels, TransposeTiledPathMatchesNaive) {
  Shape in{3, 37, 45};
  for (DType dt : {DType::F32, DType::I64, DType::I16, DType::U8}) {
    Tensor x = iota(dt, in);
    std::vector<int64_t> perm{0, 1, 2};
    do {
      Shape out;
      for (int64_t p : perm) out.push_back(in[size_t(p)]);
      Tensor y = run1("Transpose", {&x}, dt, out, attrs({{"perm", Attr::ofInts(perm)}}));
      for (int64_t i = 0; i < y.numel(); ++i) {
        auto oc = unravel(i, out);
        std::vector<int64_t> ic(3);
        for (size_t d = 0; d < 3; ++d) ic[size_t(perm[d])] = oc[d];
        ASSERT_EQ(y.getAsDouble(i), x.getAsDouble(ravel(ic, in))) << dtypeName(dt) << " perm " << shapeToString(perm);
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(ShapeKernels, TransposeDefaultReversesAndKeepsDtype) {
  Tensor x = iota(DType::I16, {2, 3});
  Tensor y = run1("Transpose", {&x}, DType::I16, {3, 2});
  EXPECT_EQ(values(y), dv({0, 3, 1, 4, 2, 5}));
}

TEST(ShapeKernels, SliceNegativeStepsAndClamping) {
  Tensor x = iota(DType::F32, {5, 6});
  Tensor starts = i64v({-1, 4}), ends = i64v({-1000, 0}), axes = i64v({1, 0}), steps = i64v({-2, -1});
  // Rows 4, 3, 2, 1; columns 5, 3, 1.
  Tensor y = run1("Slice", {&x, &starts, &ends, &axes, &steps}, DType::F32, {4, 3});
  EXPECT_EQ(values(y), dv({29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7}));
  Tensor s2 = i64v({1}), e2 = i64v({INT64_MAX});
  Tensor a2 = i64v({-1});
  Tensor y2 = run1("Slice", {&x, &s2, &e2, &a2, nullptr}, DType::F32, {5, 5});
  EXPECT_EQ(y2.getAsDouble(0), 1);
  EXPECT_EQ(y2.getAsDouble(5), 7);
}

// The spec's text, enumerated index by index. (numpy differs in one corner:
// with a negative step, a start still below 0 after adding the dim gives an
// empty slice in numpy but starts at 0 per the spec, as onnxruntime does.)
static std::vector<int64_t> specSlice(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  start = step > 0 ? std::clamp<int64_t>(start, 0, dim) : std::clamp<int64_t>(start, 0, dim - 1);
  end = step > 0 ? std::clamp<int64_t>(end, 0, dim) : std::clamp<int64_t>(end, -1, dim - 1);
  std::vector<int64_t> r;
  for (int64_t i = start; step > 0 ? i < end : i > end; i += step) r.push_back(i);
  return r;
}

TEST(ShapeKernels, SliceRandomMatchesSpecEnumeration) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> pos(-9, 9), stepD(-3, 3);
  Shape in{6, 7};
  Tensor x = iota(DType::I32, in);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int64_t> st{pos(rng), pos(rng)}, en{pos(rng), pos(rng)}, sp{stepD(rng), stepD(rng)};
    if (sp[0] == 0) sp[0] = 1;
    if (sp[1] == 0) sp[1] = -1;
    auto r0 = specSlice(6, st[0], en[0], sp[0]), r1 = specSlice(7, st[1], en[1], sp[1]);
    Tensor ts = i64v(st), te = i64v(en), tp = i64v(sp);
    Tensor y = run1("Slice", {&x, &ts, &te, nullptr, &tp}, DType::I32, {int64_t(r0.size()), int64_t(r1.size())});
    for (size_t i = 0; i < r0.size(); ++i)
      for (size_t j = 0; j < r1.size(); ++j)
        ASSERT_EQ(y.getAsInt(int64_t(i * r1.size() + j)), r0[i] * 7 + r1[j])
            << "starts " << shapeToString(st) << " ends " << shapeToString(en) << " steps " << shapeToString(sp);
  }
}

TEST(ShapeKernels, SplitThenConcatRoundTrips) {
  Shape in{3, 7, 2};
  Tensor x = randomTensor(in, 3);
  std::vector<int64_t> sizes{2, 0, 4, 1};
  std::vector<Tensor> parts;
  for (int64_t s : sizes) parts.emplace_back(DType::F32, Shape{3, s, 2});
  Tensor split = i64v(sizes);
  EXPECT_EQ(runKernelInto("Split", {&x, &split}, parts, attrs({{"axis", Attr::ofInt(-2)}})), "");
  int64_t offset = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    for (int64_t i = 0; i < parts[k].numel(); ++i) {
      auto c = unravel(i, parts[k].shape());
      c[1] += offset;
      ASSERT_EQ(parts[k].getAsDouble(i), x.getAsDouble(ravel(c, in)));
    }
    offset += sizes[k];
  }
  std::vector<const Tensor *> ins;
  for (Tensor &p : parts) ins.push_back(&p);
  Tensor back = run1("Concat", ins, DType::F32, in, attrs({{"axis", Attr::ofInt(1)}}));
  EXPECT_TRUE(back.identical(x));
}

TEST(ShapeKernels, ExpandAndTileMatchNaive) {
  Tensor x = randomTensor({3, 1, 2}, 4);
  Shape out{2, 3, 4, 2};
  Tensor shape = i64v(out);
  Tensor y = run1("Expand", {&x, &shape}, DType::F32, out);
  for (int64_t i = 0; i < y.numel(); ++i) {
    auto c = unravel(i, out);
    ASSERT_EQ(y.getAsDouble(i), x.getAsDouble(ravel({c[1], 0, c[3]}, {3, 1, 2})));
  }
  // A column broadcast along rows of 16+ takes the tiled copy (source stride 0).
  Tensor col = randomTensor({40, 1}, 6);
  Tensor wide = i64v({40, 33});
  Tensor z = run1("Expand", {&col, &wide}, DType::F32, {40, 33});
  for (int64_t i = 0; i < z.numel(); ++i) ASSERT_EQ(z.getAsDouble(i), col.getAsDouble(i / 33));
  Tensor reps = i64v({2, 3, 2});
  Shape tiled{6, 3, 4};
  Tensor t = run1("Tile", {&x, &reps}, DType::F32, tiled);
  for (int64_t i = 0; i < t.numel(); ++i) {
    auto c = unravel(i, tiled);
    ASSERT_EQ(t.getAsDouble(i), x.getAsDouble(ravel({c[0] % 3, c[1] % 1, c[2] % 2}, {3, 1, 2})));
  }
}

TEST(ShapeKernels, PadModesMatchNumpy) {
  Tensor x = iota(DType::I64, {3});
  auto pad1d = [&](const char *mode, int64_t b, int64_t e) {
    Tensor pads = i64v({b, e});
    return values(run1("Pad", {&x, &pads}, DType::I64, {3 + b + e}, attrs({{"mode", Attr::ofString(mode)}})));
  };
  // numpy.pad([0, 1, 2], ...) with the same modes.
  EXPECT_EQ(pad1d("reflect", 5, 0), dv({1, 0, 1, 2, 1, 0, 1, 2}));
  EXPECT_EQ(pad1d("wrap", 4, 5), dv({2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1}));
  EXPECT_EQ(pad1d("edge", 2, 2), dv({0, 0, 0, 1, 2, 2, 2}));
  EXPECT_EQ(pad1d("constant", 1, -1), dv({0, 0, 1}));

  Tensor m = iota(DType::F32, {2, 3});
  Tensor pads = i64v({1, -1, 0, 2}), value = f32s({}, {9.5f});
  // Axis 0: one row of 9.5 before; axis 1: drop column 0, add two after.
  Tensor y = run1("Pad", {&m, &pads, &value}, DType::F32, {3, 4});
  EXPECT_EQ(values(y), dv({9.5, 9.5, 9.5, 9.5, 1, 2, 9.5, 9.5, 4, 5, 9.5, 9.5}));
  // constant_value of another dtype (as old-opset imports produce) is converted.
  Tensor xi = iota(DType::I32, {2});
  Tensor p1 = i64v({1, 0});
  Tensor seven = f32s({}, {7.0f});
  EXPECT_EQ(values(run1("Pad", {&xi, &p1, &seven}, DType::I32, {3})), dv({7, 0, 1}));
  // axes input: pad only the last axis.
  Tensor axes = i64v({-1}), p2 = i64v({0, 1});
  EXPECT_EQ(values(run1("Pad", {&m, &p2, nullptr, &axes}, DType::F32, {2, 4})), dv({0, 1, 2, 0, 3, 4, 5, 0}));
}

TEST(ShapeKernels, GatherRowsAndErrors) {
  // An embedding-sized table: each gathered row must equal the table row.
  Tensor table = randomTensor({1000, 64}, 5);
  std::vector<int64_t> ids;
  std::mt19937 rng(2);
  for (int i = 0; i < 512; ++i) ids.push_back(int64_t(rng() % 2000) - 1000);
  Tensor idx = i64s({16, 32}, ids);
  Tensor emb = run1("Gather", {&table, &idx}, DType::F32, {16, 32, 64});
  for (int64_t j = 0; j < 512; ++j) {
    int64_t row = ids[size_t(j)] < 0 ? ids[size_t(j)] + 1000 : ids[size_t(j)];
    for (int64_t k = 0; k < 64; ++k) ASSERT_EQ(emb.getAsDouble(j * 64 + k), table.getAsDouble(row * 64 + k));
  }

  Tensor x = iota(DType::F32, {3, 4});
  Tensor i32 = Tensor::fromVector<int32_t>(DType::I32, {2}, {3, -4});
  EXPECT_EQ(values(run1("Gather", {&x, &i32}, DType::F32, {3, 2}, attrs({{"axis", Attr::ofInt(1)}}))),
            dv({3, 0, 7, 4, 11, 8}));

  std::vector<Tensor> out{Tensor(DType::F32, {1, 4})};
  Tensor bad = i64v({3});
  std::string err = runKernelInto("Gather", {&x, &bad}, out);
  EXPECT_NE(err.find("index 3 is out of range [-3, 2]"), std::string::npos) << err;
  Tensor badNeg = i64v({-4});
  EXPECT_NE(runKernelInto("Gather", {&x, &badNeg}, out).find("out of range"), std::string::npos);
}

TEST(ShapeKernels, GatherElementsAndND) {
  Tensor data = f32s({2, 2}, {1, 2, 3, 4});
  Tensor idx = i64s({2, 2}, {0, 0, 1, 0});
  EXPECT_EQ(values(run1("GatherElements", {&data, &idx}, DType::F32, {2, 2}, attrs({{"axis", Attr::ofInt(1)}}))),
            dv({1, 1, 4, 3}));
  Tensor neg = i64s({1, 2}, {-1, 0});
  EXPECT_EQ(values(run1("GatherElements", {&data, &neg}, DType::F32, {1, 2})), dv({3, 2}));
  std::vector<Tensor> out{Tensor(DType::F32, {1, 2})};
  Tensor bad = i64s({1, 2}, {2, 0});
  EXPECT_NE(runKernelInto("GatherElements", {&data, &bad}, out).find("out of range"), std::string::npos);

  // The spec's batch_dims = 1 example.
  Tensor d3 = iota(DType::I32, {2, 2, 2});
  Tensor bi = i64s({2, 1}, {1, 0});
  EXPECT_EQ(values(run1("GatherND", {&d3, &bi}, DType::I32, {2, 2}, attrs({{"batch_dims", Attr::ofInt(1)}}))),
            dv({2, 3, 4, 5}));
  Tensor full = i64s({2, 3}, {1, 0, 1, 0, -1, 0});
  EXPECT_EQ(values(run1("GatherND", {&d3, &full}, DType::I32, {2})), dv({5, 2}));
  std::vector<Tensor> o2{Tensor(DType::I32, {1})};
  Tensor badND = i64s({1, 3}, {0, 2, 0});
  EXPECT_NE(runKernelInto("GatherND", {&d3, &badND}, o2).find("out of range"), std::string::npos);
}

TEST(ShapeKernels, ScattersFollowTheSpecExamples) {
  Tensor data = f32s({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor idx = i64s({4, 1}, {4, 3, 1, 7});
  Tensor upd = f32s({4}, {9, 10, 11, 12});
  EXPECT_EQ(values(run1("ScatterND", {&data, &idx, &upd}, DType::F32, {8})), dv({1, 11, 3, 10, 9, 6, 7, 12}));
  Tensor dup = i64s({2, 1}, {0, 0});
  Tensor two = f32s({2}, {2, 3});
  EXPECT_EQ(
      values(run1("ScatterND", {&data, &dup, &two}, DType::F32, {8}, attrs({{"reduction", Attr::ofString("mul")}}))),
      dv({6, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(
      values(run1("ScatterND", {&data, &dup, &two}, DType::F32, {8}, attrs({{"reduction", Attr::ofString("min")}}))),
      dv({1, 2, 3, 4, 5, 6, 7, 8}));
  std::vector<Tensor> out{Tensor(DType::F32, {8})};
  Tensor bad = i64s({1, 1}, {8});
  Tensor one = f32s({1}, {0});
  EXPECT_NE(runKernelInto("ScatterND", {&data, &bad, &one}, out).find("out of range"), std::string::npos);

  Tensor row = f32s({1, 5}, {1, 2, 3, 4, 5});
  Tensor ei = i64s({1, 2}, {1, 3});
  Tensor eu = f32s({1, 2}, {1.5f, 2.5f});
  EXPECT_EQ(values(run1("ScatterElements", {&row, &ei, &eu}, DType::F32, {1, 5}, attrs({{"axis", Attr::ofInt(1)}}))),
            dv({1, 1.5, 3, 2.5, 5}));
  Tensor same = i64s({1, 2}, {1, -4});
  EXPECT_EQ(values(run1("ScatterElements", {&row, &same, &eu}, DType::F32, {1, 5},
                        attrs({{"axis", Attr::ofInt(1)}, {"reduction", Attr::ofString("add")}}))),
            dv({1, 6, 3, 4, 5}));
  std::vector<Tensor> o2{Tensor(DType::F32, {1, 5})};
  Tensor badE = i64s({1, 2}, {5, 0});
  EXPECT_NE(
      runKernelInto("ScatterElements", {&row, &badE, &eu}, o2, attrs({{"axis", Attr::ofInt(1)}})).find("out of range"),
      std::string::npos);
}

TEST(ShapeKernels, OneHotOutOfRangeGivesOffValues) {
  Tensor idx = i64v({1, -1, 3, -4});
  Tensor depth = f32s({}, {3.0f});
  Tensor vals = Tensor::fromVector<int32_t>(DType::I32, {2}, {-1, 5});
  EXPECT_EQ(values(run1("OneHot", {&idx, &depth, &vals}, DType::I32, {4, 3})),
            dv({-1, 5, -1, -1, -1, 5, -1, -1, -1, -1, -1, -1}));
  // axis 0: the depth dim comes first.
  EXPECT_EQ(values(run1("OneHot", {&idx, &depth, &vals}, DType::I32, {3, 4}, attrs({{"axis", Attr::ofInt(0)}}))),
            dv({-1, -1, -1, -1, 5, -1, -1, -1, -1, 5, -1, -1}));
}

TEST(ShapeKernels, ShapeAndSize) {
  Tensor x(DType::F32, {2, 3, 4, 5});
  EXPECT_EQ(values(run1("Shape", {&x}, DType::I64, {4})), dv({2, 3, 4, 5}));
  EXPECT_EQ(values(run1("Shape", {&x}, DType::I64, {2}, attrs({{"start", Attr::ofInt(-3)}, {"end", Attr::ofInt(-1)}}))),
            dv({3, 4}));
  EXPECT_EQ(values(run1("Shape", {&x}, DType::I64, {0}, attrs({{"start", Attr::ofInt(3)}, {"end", Attr::ofInt(1)}}))),
            dv({}));
  EXPECT_EQ(values(run1("Size", {&x}, DType::I64, {})), dv({120}));
}

TEST(ShapeKernels, RangeAndConstantOfShape) {
  Tensor a = i64scalar(10), l = i64scalar(-3), d = i64scalar(-4);
  EXPECT_EQ(values(run1("Range", {&a, &l, &d}, DType::I64, {4})), dv({10, 6, 2, -2}));
  Tensor fa = f32s({}, {0.5f}), fl = f32s({}, {2.0f}), fd = f32s({}, {0.5f});
  EXPECT_EQ(values(run1("Range", {&fa, &fl, &fd}, DType::F32, {3})), dv({0.5, 1.0, 1.5}));
  std::vector<Tensor> wrong{Tensor(DType::I64, {3})};
  EXPECT_NE(runKernelInto("Range", {&a, &l, &d}, wrong).find("output must be i64[4]"), std::string::npos);

  Tensor shape = i64v({2, 2});
  EXPECT_EQ(values(run1("ConstantOfShape", {&shape}, DType::I64, {2, 2},
                        attrs({{"value", Attr::ofTensor(i64s({1}, {-7}))}}))),
            dv({-7, -7, -7, -7}));
  EXPECT_EQ(values(run1("ConstantOfShape", {&shape}, DType::F32, {2, 2})), dv({0, 0, 0, 0}));
}

TEST(ShapeKernels, CumSumMatchesNaive) {
  Shape s{3, 4, 5};
  for (DType dt : {DType::F32, DType::I64, DType::F64}) {
    Tensor x = randomTensor(s, 9, dt);
    if (dt == DType::I64) x = iota(DType::I64, s);
    for (int64_t axis = -3; axis < 3; ++axis)
      for (int excl = 0; excl < 2; ++excl)
        for (int rev = 0; rev < 2; ++rev) {
          Tensor ax = Tensor::fromVector<int32_t>(DType::I32, {}, {int32_t(axis)});
          Tensor y = run1("CumSum", {&x, &ax}, dt, s,
                          attrs({{"exclusive", Attr::ofInt(excl)}, {"reverse", Attr::ofInt(rev)}}));
          int64_t a = axis < 0 ? axis + 3 : axis;
          for (int64_t i = 0; i < y.numel(); ++i) {
            auto c = unravel(i, s);
            double want = 0;
            for (int64_t j = 0; j < s[size_t(a)]; ++j) {
              bool in =
                  rev ? (excl ? j > c[size_t(a)] : j >= c[size_t(a)]) : (excl ? j < c[size_t(a)] : j <= c[size_t(a)]);
              auto cj = c;
              cj[size_t(a)] = j;
              if (in) want += x.getAsDouble(ravel(cj, s));
            }
            ASSERT_NEAR(y.getAsDouble(i), want, 1e-4) << "axis " << axis << " exclusive " << excl << " reverse " << rev;
          }
        }
  }
}

TEST(ShapeKernels, TriluMatchesNaive) {
  Shape s{2, 4, 5};
  Tensor x = randomTensor(s, 11);
  for (int upper = 0; upper < 2; ++upper)
    for (int64_t k : {int64_t(-7), int64_t(-2), int64_t(0), int64_t(1), int64_t(4), int64_t(9), INT64_MAX}) {
      Tensor kt = i64scalar(k);
      Tensor y = run1("Trilu", {&x, &kt}, DType::F32, s, attrs({{"upper", Attr::ofInt(upper)}}));
      for (int64_t i = 0; i < y.numel(); ++i) {
        auto c = unravel(i, s);
        bool keep = upper ? c[2] - c[1] >= k : c[2] - c[1] <= k;
        ASSERT_EQ(y.getAsDouble(i), keep ? x.getAsDouble(i) : 0.0) << "upper " << upper << " k " << k;
      }
    }
}

TEST(ShapeKernels, MismatchedOutputsAreErrorsNotCrashes) {
  Tensor x = iota(DType::F32, {2, 3});
  std::vector<Tensor> out{Tensor(DType::F32, {7})};
  EXPECT_NE(runKernelInto("Reshape", {&x, nullptr}, out).find("cannot become"), std::string::npos);
  std::vector<Tensor> parts{Tensor(DType::F32, {2, 1}), Tensor(DType::F32, {2, 1})};
  EXPECT_NE(runKernelInto("Split", {&x}, parts, attrs({{"axis", Attr::ofInt(1)}})).find("do not add up"),
            std::string::npos);
  Tensor s = i64v({0}), e = i64v({2});
  std::vector<Tensor> sl{Tensor(DType::F32, {3, 3})};
  EXPECT_NE(runKernelInto("Slice", {&x, &s, &e}, sl).find("does not match"), std::string::npos);
}
