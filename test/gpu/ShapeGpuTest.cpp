// CUDA data-movement kernels (runtime/cuda/ShapeKernels.cu) against the CPU
// kernels: every Transpose permutation of 4-D tensors on the gather path and
// on the tiled path, Concat along each axis, Split variants, Slice with
// negative starts/ends/steps and clamping, megac.SliceGrad, Expand, Tile, Pad
// in every mode, several element sizes and large tensors.
#include "RowOpsTestUtil.h"

#include "runtime/cpu/ShapeSemantics.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace megac::gputest {
namespace {


// Values in [-9, 9) (integers for integer types, 0/1 for bool).
Tensor values(Shape s, unsigned seed, DType dt = DType::F32) {
  if (dt == DType::Bool) return randomTensor(std::move(s), seed, dt, 0, 2);
  if (dt == DType::U8) return randomTensor(std::move(s), seed, dt, 0, 256);
  return randomTensor(std::move(s), seed, dt, -9, 9);
}

OpCase oneOutput(const std::string &op, std::vector<Tensor> inputs, std::vector<bool> constant, DType dt, Shape out,
                 Attrs attrs = {}) {
  OpCase c;
  c.op = op;
  c.attrs = std::move(attrs);
  c.inputs = std::move(inputs);
  c.constant = std::move(constant);
  c.outputs = {{dt, std::move(out)}};
  return c;
}

// ---------------------------------------------------------------------------
// Reshape family

TEST(ShapeGpu, ReshapeSqueezeUnsqueezeFlattenCopyBytes) {
  for (DType dt : {DType::F32, DType::I64, DType::Bool, DType::F16}) {
    SCOPED_TRACE(dtypeName(dt));
    Tensor x = values({2, 3, 4}, 1, dt);
    EXPECT_GPU_MATCHES_CPU(oneOutput("Reshape", {x, int64s({2}, {4, -1})}, {false, true}, dt, {4, 6}), gpu(), 0);
    Tensor y = values({1, 3, 1, 5}, 2, dt);
    EXPECT_GPU_MATCHES_CPU(oneOutput("Squeeze", {y, int64s({2}, {0, -2})}, {false, true}, dt, {3, 5}), gpu(), 0);
    EXPECT_GPU_MATCHES_CPU(oneOutput("Unsqueeze", {x, int64s({2}, {0, 4})}, {false, true}, dt, {1, 2, 3, 4, 1}), gpu(),
                           0);
    EXPECT_GPU_MATCHES_CPU(oneOutput("Flatten", {x}, {false}, dt, {2, 12}, makeAttrs({{"axis", Attr::ofInt(1)}})),
                           gpu(), 0);
  }
}

// ---------------------------------------------------------------------------
// Transpose

OpCase transposeCase(const Tensor &x, const std::vector<int64_t> &perm) {
  Shape out;
  for (int64_t p : perm) out.push_back(x.shape()[size_t(p)]);
  return oneOutput("Transpose", {x}, {false}, x.dtype(), out, makeAttrs({{"perm", Attr::ofInts(perm)}}));
}

void expectEveryPermutation(const Shape &shape, DType dt, unsigned seed) {
  Tensor x = values(shape, seed, dt);
  std::vector<int64_t> perm(shape.size());
  std::iota(perm.begin(), perm.end(), 0);
  do {
    SCOPED_TRACE(shapeToString(shape) + " perm " + shapeToString(perm) + " " + dtypeName(dt));
    EXPECT_GPU_MATCHES_CPU(transposeCase(x, perm), gpu(), 0);
  } while (std::next_permutation(perm.begin(), perm.end()));
}

// Small odd dims: the element gather.
TEST(ShapeGpu, TransposeEveryPermutationSmallOddDims) { expectEveryPermutation({3, 5, 7, 9}, DType::F32, 10); }

// Dims of 16 and more: the 32x32 tiles where the last dim moves (partial
// tiles at the edges), 16-byte rows where it stays.
TEST(ShapeGpu, TransposeEveryPermutationTiledDims) {
  expectEveryPermutation({17, 33, 20, 18}, DType::F32, 11);
  expectEveryPermutation({3, 40, 1, 37}, DType::F32, 12);
}

TEST(ShapeGpu, TransposeOtherElementSizes) {
  for (DType dt : {DType::U8, DType::F16, DType::I64, DType::Bool, DType::BF16}) {
    Tensor x = values({5, 33, 18, 20}, 13, dt);
    for (const std::vector<int64_t> &perm : {std::vector<int64_t>{0, 2, 1, 3}, {0, 1, 3, 2}, {3, 2, 1, 0},
                                             {1, 3, 0, 2}, {2, 0, 3, 1}}) {
      SCOPED_TRACE(shapeToString(perm) + " " + dtypeName(dt));
      EXPECT_GPU_MATCHES_CPU(transposeCase(x, perm), gpu(), 0);
    }
  }
}

TEST(ShapeGpu, TransposeRanksAndDefaultPerm) {
  Tensor x = values({2, 3, 4, 5, 6}, 14);
  EXPECT_GPU_MATCHES_CPU(transposeCase(x, {4, 0, 3, 1, 2}), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(oneOutput("Transpose", {x}, {false}, DType::F32, {6, 5, 4, 3, 2}), gpu(), 0);
  Tensor y = values({2, 3, 2, 3, 2, 3, 2, 3}, 15);
  EXPECT_GPU_MATCHES_CPU(transposeCase(y, {7, 0, 6, 1, 5, 2, 4, 3}), gpu(), 0);
  Tensor v = values({7}, 16);
  EXPECT_GPU_MATCHES_CPU(transposeCase(v, {0}), gpu(), 0);
  Tensor s = values({}, 17);
  EXPECT_GPU_MATCHES_CPU(transposeCase(s, {}), gpu(), 0);
  Tensor e = values({3, 0, 4}, 18);
  EXPECT_GPU_MATCHES_CPU(transposeCase(e, {2, 0, 1}), gpu(), 0);
}

TEST(ShapeGpu, TransposeLarge) {
  // [B, S, H, D] -> [B, H, S, D] (rows of D stay contiguous).
  EXPECT_GPU_MATCHES_CPU(transposeCase(values({4, 256, 12, 64}, 19), {0, 2, 1, 3}), gpu(), 0);
  // [M, N] -> [N, M] and a batched last-two-dims swap, with partial tiles.
  EXPECT_GPU_MATCHES_CPU(transposeCase(values({1031, 2049}, 20), {1, 0}), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(transposeCase(values({6, 300, 517}, 21), {0, 2, 1}), gpu(), 0);
  // [B, H, S, D] -> [B, S, H, D] with D = 3 (not a whole 16-byte unit).
  EXPECT_GPU_MATCHES_CPU(transposeCase(values({2, 50, 1000, 3}, 22), {0, 2, 1, 3}), gpu(), 0);
}

// ---------------------------------------------------------------------------
// Concat and Split

TEST(ShapeGpu, ConcatAlongEachAxis) {
  const Shape base{3, 4, 5};
  unsigned seed = 30;
  for (int64_t axis = -3; axis < 3; ++axis)
    for (DType dt : {DType::F32, DType::I64, DType::Bool, DType::F16}) {
      SCOPED_TRACE("axis " + std::to_string(axis) + " " + dtypeName(dt));
      const size_t a = size_t(axis < 0 ? axis + 3 : axis);
      std::vector<Tensor> ins;
      Shape out = base;
      out[a] = 0;
      for (int64_t size : {2, 1, 0, 3}) {
        Shape s = base;
        s[a] = size;
        ins.push_back(values(s, seed++, dt));
        out[a] += size;
      }
      OpCase c = oneOutput("Concat", ins, {}, dt, out, makeAttrs({{"axis", Attr::ofInt(axis)}}));
      EXPECT_GPU_MATCHES_CPU(c, gpu(), 0);
    }
  // One input, and a large concatenation of rows of different widths.
  EXPECT_GPU_MATCHES_CPU(oneOutput("Concat", {values({4, 7}, 40)}, {}, DType::F32, {4, 7},
                                   makeAttrs({{"axis", Attr::ofInt(1)}})),
                         gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(oneOutput("Concat", {values({2048, 1024}, 41), values({2048, 1}, 42), values({2048, 515}, 43)},
                                   {}, DType::F32, {2048, 1540}, makeAttrs({{"axis", Attr::ofInt(-1)}})),
                         gpu(), 0);
}

OpCase splitCase(const Tensor &x, int64_t axis, const std::vector<int64_t> &sizes, bool sizesAsInput, Attrs attrs = {}) {
  OpCase c;
  c.op = "Split";
  c.attrs = std::move(attrs);
  c.attrs.set("axis", Attr::ofInt(axis));
  c.inputs = {x};
  c.constant = {false, true};
  if (sizesAsInput) c.inputs.push_back(int64s({int64_t(sizes.size())}, sizes));
  const size_t a = size_t(axis < 0 ? axis + x.rank() : axis);
  for (int64_t s : sizes) {
    Shape out = x.shape();
    out[a] = s;
    c.outputs.push_back({x.dtype(), out});
  }
  return c;
}

TEST(ShapeGpu, SplitVariants) {
  Tensor x = values({4, 9, 5}, 50);
  EXPECT_GPU_MATCHES_CPU(splitCase(x, 1, {2, 3, 4}, true), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(splitCase(x, 1, {0, 9}, true), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(splitCase(x, -1, {1, 4}, true), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(splitCase(x, 0, {2, 2}, false), gpu(), 0); // equal split
  EXPECT_GPU_MATCHES_CPU(splitCase(x, 1, {3, 3, 3}, false), gpu(), 0);
  Tensor y = values({3, 7}, 51, DType::I64);
  EXPECT_GPU_MATCHES_CPU(splitCase(y, 1, {3, 3, 1}, false, makeAttrs({{"num_outputs", Attr::ofInt(3)}})), gpu(), 0);
  Tensor z = values({10}, 52, DType::U8);
  EXPECT_GPU_MATCHES_CPU(splitCase(z, 0, {5, 1, 4}, true), gpu(), 0);
  // [B, S, 3H] -> Q, K, V.
  Tensor qkv = values({4, 128, 3 * 768}, 53);
  EXPECT_GPU_MATCHES_CPU(splitCase(qkv, 2, {768, 768, 768}, true), gpu(), 0);
}

// An unused output (nullptr): the GPU kernel takes its size from the split
// input or the equal split and still fills the other outputs correctly.
TEST(ShapeGpu, SplitWithUnusedOutput) {
  Tensor x = values({4, 9, 5}, 54);
  OpCase all = splitCase(x, 1, {2, 3, 4}, true);
  auto ref = runOnBoth(all, gpu());
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  OpCase partial = all;
  partial.outputs[1].first = DType::Undefined;
  auto r = runGpuOnly(partial, gpu());
  ASSERT_TRUE(r.error.empty()) << r.error;
  for (size_t k : {size_t(0), size_t(2)}) EXPECT_TRUE(r.outputs[k].identical(ref.cpu[k])) << "output " << k;

  OpCase equal = splitCase(x, 1, {3, 3, 3}, false);
  auto ref2 = runOnBoth(equal, gpu());
  ASSERT_TRUE(ref2.error.empty()) << ref2.error;
  equal.outputs[0].first = DType::Undefined;
  auto r2 = runGpuOnly(equal, gpu());
  ASSERT_TRUE(r2.error.empty()) << r2.error;
  for (size_t k : {size_t(1), size_t(2)}) EXPECT_TRUE(r2.outputs[k].identical(ref2.cpu[k])) << "output " << k;
}

// ---------------------------------------------------------------------------
// Slice and megac.SliceGrad

struct SliceSpec {
  std::vector<int64_t> starts, ends, axes, steps; // empty axes/steps: omitted inputs
};

Shape slicedShape(const Shape &data, const SliceSpec &s) {
  auto dims = cpu::resolveSlice(data, s.starts, s.ends, s.axes, s.steps);
  EXPECT_TRUE(bool(dims));
  if (!dims) {
    llvm::consumeError(dims.takeError());
    return data;
  }
  Shape out;
  for (const cpu::SliceDim &d : *dims) out.push_back(d.count);
  return out;
}

// Appends starts, ends, axes?, steps? as constant inputs (an omitted axes
// before given steps is an undefined tensor).
void addSliceInputs(OpCase &c, const SliceSpec &s) {
  auto ints = [](const std::vector<int64_t> &v) { return int64s({int64_t(v.size())}, v); };
  c.inputs.push_back(ints(s.starts));
  c.inputs.push_back(ints(s.ends));
  if (!s.axes.empty() || !s.steps.empty()) c.inputs.push_back(s.axes.empty() ? Tensor() : ints(s.axes));
  if (!s.steps.empty()) c.inputs.push_back(ints(s.steps));
  c.constant.assign(c.inputs.size(), true);
  c.constant[0] = false;
}

constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();

const SliceSpec kSlices[] = {
    {{1}, {4}, {0}, {}},                        // plain
    {{-4, 1}, {-1, 100}, {0, 2}, {}},           // negative start/end, end clamped
    {{0}, {7}, {2}, {2}},                       // step 2 along the innermost dim
    {{1, 0}, {5, 6}, {-3, -2}, {3, 4}},         // steps on outer dims, negative axes
    {{-1}, {kMin}, {1}, {-1}},                  // reversed whole axis
    {{4, 5}, {0, 1}, {0, 2}, {-2, -3}},         // negative steps on two axes
    {{10}, {-10}, {0}, {-1}},                   // negative step, both clamped
    {{-100}, {100}, {-1}, {3}},                 // clamped, step 3
    {{2}, {2}, {1}, {}},                        // empty
    {{3}, {1}, {2}, {}},                        // start after end: empty
    {{0, 1, 2}, {kMax, kMax, kMax}, {}, {}},    // axes and steps omitted
    {{1, -5}, {kMax, -1}, {}, {1, 2}},          // axes omitted, steps given
    {{-1, -1, -1}, {kMin, kMin, kMin}, {0, 1, 2}, {-1, -2, -3}},
};

TEST(ShapeGpu, SliceNegativeAndSteppedCases) {
  const Shape data{5, 6, 7};
  unsigned seed = 60;
  for (DType dt : {DType::F32, DType::I64, DType::F16, DType::Bool})
    for (const SliceSpec &s : kSlices) {
      SCOPED_TRACE("starts " + shapeToString(s.starts) + " ends " + shapeToString(s.ends) + " axes " +
                   shapeToString(s.axes) + " steps " + shapeToString(s.steps) + " " + dtypeName(dt));
      OpCase c = oneOutput("Slice", {values(data, seed++, dt)}, {}, dt, slicedShape(data, s));
      addSliceInputs(c, s);
      EXPECT_GPU_MATCHES_CPU(c, gpu(), 0);
    }
}

TEST(ShapeGpu, SliceLarge) {
  const Shape data{2048, 1024};
  Tensor x = values(data, 70);
  for (const SliceSpec &s : {SliceSpec{{100}, {900}, {1}, {}}, SliceSpec{{1}, {2047}, {0}, {}},
                             SliceSpec{{-1}, {kMin}, {1}, {-1}}, SliceSpec{{0, 3}, {kMax, kMax}, {0, 1}, {2, 4}}}) {
    OpCase c = oneOutput("Slice", {x}, {}, DType::F32, slicedShape(data, s));
    addSliceInputs(c, s);
    EXPECT_GPU_MATCHES_CPU(c, gpu(), 0);
  }
}

TEST(ShapeGpu, SliceGradScattersIntoZeros) {
  const Shape data{5, 6, 7};
  unsigned seed = 80;
  for (DType dt : {DType::F32, DType::I64})
    for (const SliceSpec &s : kSlices) {
      SCOPED_TRACE("starts " + shapeToString(s.starts) + " ends " + shapeToString(s.ends) + " axes " +
                   shapeToString(s.axes) + " steps " + shapeToString(s.steps) + " " + dtypeName(dt));
      OpCase c = oneOutput("megac.SliceGrad", {values(slicedShape(data, s), seed++, dt)}, {}, dt, data,
                           makeAttrs({{"shape", Attr::ofInts(data)}}));
      addSliceInputs(c, s);
      EXPECT_GPU_MATCHES_CPU(c, gpu(), 0);
    }
  const Shape big{1024, 768};
  SliceSpec s{{0, 256}, {kMax, 512}, {0, 1}, {}};
  OpCase c = oneOutput("megac.SliceGrad", {values(slicedShape(big, s), 90)}, {}, DType::F32, big,
                       makeAttrs({{"shape", Attr::ofInts(big)}}));
  addSliceInputs(c, s);
  EXPECT_GPU_MATCHES_CPU(c, gpu(), 0);
}

// ---------------------------------------------------------------------------
// Expand, Tile, Pad

TEST(ShapeGpu, Expand) {
  struct E {
    Shape in, out;
  };
  unsigned seed = 100;
  for (const E &e : {E{{3, 1}, {2, 3, 4}}, E{{4}, {2, 3, 4}}, E{{}, {5}}, E{{1, 1}, {3, 1003}}, E{{2, 1, 6}, {2, 5, 6}},
                     E{{3, 4}, {3, 4}}, E{{1, 3, 1}, {2, 3, 0}}, E{{1, 1024}, {4096, 1024}}, E{{4096, 1}, {4096, 256}}})
    for (DType dt : {DType::F32, DType::Bool, DType::I64, DType::F16}) {
      SCOPED_TRACE(shapeToString(e.in) + " -> " + shapeToString(e.out) + " " + dtypeName(dt));
      OpCase c = oneOutput("Expand", {values(e.in, seed++, dt), int64s({int64_t(e.out.size())}, e.out)},
                           {false, true}, dt, e.out);
      EXPECT_GPU_MATCHES_CPU(c, gpu(), 0);
    }
}

TEST(ShapeGpu, Tile) {
  struct T {
    Shape in;
    std::vector<int64_t> repeats;
  };
  unsigned seed = 120;
  for (const T &t : {T{{2, 3}, {2, 3}}, T{{3, 1, 5}, {1, 4, 2}}, T{{7}, {1}}, T{{2, 3, 4}, {3, 1, 2}},
                     T{{1, 1, 1, 1}, {2, 3, 4, 5}}, T{{2, 2, 2, 2}, {2, 2, 2, 2}}, T{{64, 256}, {8, 4}}})
    for (DType dt : {DType::F32, DType::U8, DType::I64}) {
      SCOPED_TRACE(shapeToString(t.in) + " x " + shapeToString(t.repeats) + " " + dtypeName(dt));
      Shape out = t.in;
      for (size_t d = 0; d < out.size(); ++d) out[d] *= t.repeats[d];
      OpCase c = oneOutput("Tile", {values(t.in, seed++, dt), int64s({int64_t(t.repeats.size())}, t.repeats)},
                           {false, true}, dt, out);
      EXPECT_GPU_MATCHES_CPU(c, gpu(), 0);
    }
}

struct PadCase {
  Shape in;
  std::vector<int64_t> pads, axes; // empty axes: omitted
};

OpCase padCase(const PadCase &p, const std::string &mode, DType dt, unsigned seed, Tensor value, bool valueConstant) {
  auto full = cpu::resolvePads(int64_t(p.in.size()), p.pads, p.axes);
  EXPECT_TRUE(bool(full));
  Shape out = p.in;
  if (full)
    for (size_t d = 0; d < out.size(); ++d) out[d] += (*full)[d] + (*full)[d + out.size()];
  else llvm::consumeError(full.takeError());
  OpCase c = oneOutput("Pad", {values(p.in, seed, dt), int64s({int64_t(p.pads.size())}, p.pads), value}, {}, dt, out,
                       makeAttrs({{"mode", Attr::ofString(mode)}}));
  c.constant = {false, true, valueConstant, true};
  if (!p.axes.empty()) c.inputs.push_back(int64s({int64_t(p.axes.size())}, p.axes));
  return c;
}

TEST(ShapeGpu, PadEveryMode) {
  const PadCase cases[] = {
      {{3, 4}, {1, 2, 0, 3}, {}},
      {{3, 4}, {-1, 1, 0, -2}, {}},  // negative pads crop
      {{2, 3, 5}, {2, 7}, {-1}},     // axes input; pads wider than the dim (wrap / reflect repeat)
      {{4, 1, 6}, {0, 2, 1, 0, 3, 2}, {}},
      {{5}, {0, 0}, {}},
  };
  unsigned seed = 140;
  for (const PadCase &p : cases)
    for (const char *mode : {"constant", "edge", "reflect", "wrap"})
      for (DType dt : {DType::F32, DType::I64, DType::U8}) {
        SCOPED_TRACE(shapeToString(p.in) + " pads " + shapeToString(p.pads) + " " + mode + " " + dtypeName(dt));
        Tensor value(dt, {});
        value.setFromDouble(0, 7);
        EXPECT_GPU_MATCHES_CPU(padCase(p, mode, dt, seed++, value, true), gpu(), 0);
      }
}

TEST(ShapeGpu, PadConstantValueSources) {
  const PadCase p{{3, 5}, {2, 1, 1, 3}, {}};
  // Omitted (zero), a constant of another type (converted as the CPU does),
  // and a device scalar that is not a plan constant.
  EXPECT_GPU_MATCHES_CPU(padCase(p, "constant", DType::F32, 150, Tensor(), false), gpu(), 0);
  Tensor d(DType::F64, {});
  d.setFromDouble(0, -2.5);
  EXPECT_GPU_MATCHES_CPU(padCase(p, "constant", DType::F32, 151, d, true), gpu(), 0);
  EXPECT_GPU_MATCHES_CPU(padCase(p, "constant", DType::F32, 152, Tensor::scalar(3.25f), false), gpu(), 0);
  // Large: [B, S] token ids padded on the right.
  Tensor v(DType::I64, {});
  v.setFromDouble(0, -100);
  EXPECT_GPU_MATCHES_CPU(padCase({{64, 4000}, {0, 0, 0, 96}, {}}, "constant", DType::I64, 153, v, true), gpu(), 0);
}

// Shape-like inputs must be plan constants on the GPU (the CPU reads them
// from the tensor).
TEST(ShapeGpu, NonConstantSliceStartsIsAnError) {
  const Shape data{5, 6, 7};
  SliceSpec s{{1}, {4}, {0}, {}};
  OpCase c = oneOutput("Slice", {values(data, 160)}, {}, DType::F32, slicedShape(data, s));
  addSliceInputs(c, s);
  c.constant[1] = false;
  EXPECT_GPU_ERROR(c, gpu(), "must be a constant");
}

} // namespace
} // namespace megac::gputest
