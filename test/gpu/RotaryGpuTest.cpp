// CUDA RotaryEmbedding against the CPU kernel.
#include "RowOpsTestUtil.h"

#include <cmath>

namespace megac::gputest {
namespace {

struct RotaryOptions {
  bool interleaved = false;
  int64_t rotaryDim = 0; // 0: the whole head
  int64_t numHeads = 0;  // set for 3-D input
};

Attrs rotaryAttrs(const RotaryOptions &o) {
  Attrs a = makeAttrs({{"interleaved", Attr::ofInt(o.interleaved)}});
  if (o.rotaryDim) a.set("rotary_embedding_dim", Attr::ofInt(o.rotaryDim));
  if (o.numHeads) a.set("num_heads", Attr::ofInt(o.numHeads));
  return a;
}

// Caches of shape `cacheShape` (last dim = rotary dim / 2) holding real
// angles, so that cos^2 + sin^2 = 1 as in a model.
std::pair<Tensor, Tensor> caches(const Shape &cacheShape, unsigned seed) {
  Tensor angle = randomTensor(cacheShape, seed, DType::F32, -3.2, 3.2), c(DType::F32, cacheShape),
         s(DType::F32, cacheShape);
  for (int64_t i = 0; i < angle.numel(); ++i) {
    c.data<float>()[i] = std::cos(angle.data<float>()[i]);
    s.data<float>()[i] = std::sin(angle.data<float>()[i]);
  }
  return {c, s};
}

OpCase rotaryCase(const Shape &x, const Shape &cacheShape, const RotaryOptions &o, unsigned seed,
                  Tensor positionIds = Tensor()) {
  auto [c, s] = caches(cacheShape, seed + 1);
  OpCase oc;
  oc.op = "RotaryEmbedding";
  oc.attrs = rotaryAttrs(o);
  oc.inputs = {randomTensor(x, seed), c, s, positionIds};
  oc.outputs = {{DType::F32, x}};
  return oc;
}

// position_ids of `shape` in [0, maxPositions).
Tensor positions(const Shape &shape, int64_t maxPositions, unsigned seed) {
  return randomTensor(shape, seed, DType::I64, 0, double(maxPositions));
}

TEST(RotaryGpu, FourDimensionalHalves) {
  EXPECT_GPU_MATCHES_CPU(rotaryCase({2, 4, 7, 16}, {2, 7, 8}, {}, 1), gpu(), 1e-6);
}

TEST(RotaryGpu, Interleaved) {
  RotaryOptions o;
  o.interleaved = true;
  EXPECT_GPU_MATCHES_CPU(rotaryCase({2, 4, 7, 16}, {2, 7, 8}, o, 2), gpu(), 1e-6);
}

TEST(RotaryGpu, PartialRotaryDim) {
  for (bool interleaved : {false, true}) {
    RotaryOptions o;
    o.interleaved = interleaved;
    o.rotaryDim = 6;
    EXPECT_GPU_MATCHES_CPU(rotaryCase({2, 3, 5, 10}, {2, 5, 3}, o, 3), gpu(), 1e-6);
  }
}

TEST(RotaryGpu, ThreeDimensionalWithNumHeads) {
  for (bool interleaved : {false, true}) {
    RotaryOptions o;
    o.interleaved = interleaved;
    o.numHeads = 4;
    EXPECT_GPU_MATCHES_CPU(rotaryCase({2, 7, 4 * 16}, {2, 7, 8}, o, 4), gpu(), 1e-6);
    o.rotaryDim = 8;
    EXPECT_GPU_MATCHES_CPU(rotaryCase({2, 7, 4 * 16}, {2, 7, 4}, o, 5), gpu(), 1e-6);
  }
}

// Caches of batch 1 broadcast over the batch (as the torch exporter emits them).
TEST(RotaryGpu, BroadcastCaches) {
  EXPECT_GPU_MATCHES_CPU(rotaryCase({3, 2, 9, 8}, {1, 9, 4}, {}, 6), gpu(), 1e-6);
  RotaryOptions o;
  o.numHeads = 2;
  EXPECT_GPU_MATCHES_CPU(rotaryCase({3, 9, 16}, {1, 9, 4}, o, 7), gpu(), 1e-6);
}

TEST(RotaryGpu, PositionIds) {
  for (bool interleaved : {false, true}) {
    RotaryOptions o;
    o.interleaved = interleaved;
    EXPECT_GPU_MATCHES_CPU(rotaryCase({2, 4, 7, 16}, {32, 8}, o, 8, positions({2, 7}, 32, 9)), gpu(), 1e-6);
    EXPECT_GPU_MATCHES_CPU(rotaryCase({2, 4, 7, 16}, {32, 8}, o, 10, positions({1, 7}, 32, 11)), gpu(), 1e-6);
    o.numHeads = 4;
    EXPECT_GPU_MATCHES_CPU(rotaryCase({2, 7, 64}, {32, 8}, o, 12, positions({2, 7}, 32, 13)), gpu(), 1e-6);
    EXPECT_GPU_MATCHES_CPU(rotaryCase({2, 7, 64}, {32, 8}, o, 14, convertTo(positions({2, 7}, 32, 15), DType::I32)),
                           gpu(), 1e-6);
  }
}

TEST(RotaryGpu, ModelSized) {
  RotaryOptions o;
  o.numHeads = 32;
  EXPECT_GPU_MATCHES_CPU(rotaryCase({2, 2048, 32 * 80}, {4096, 40}, o, 16, positions({1, 2048}, 4096, 17)), gpu(),
                         1e-6);
  EXPECT_GPU_MATCHES_CPU(rotaryCase({2, 32, 2048, 128}, {1, 2048, 64}, {}, 18), gpu(), 1e-6);
}

TEST(RotaryGpu, SingleToken) { EXPECT_GPU_MATCHES_CPU(rotaryCase({1, 1, 1, 2}, {1, 1, 1}, {}, 19), gpu(), 1e-6); }

// The CPU rejects an out-of-range position id; the GPU zeros that token's
// rotated part and still copies the rest (documented in RotaryKernels.cu).
TEST(RotaryGpu, OutOfRangePositionGivesZeros) {
  RotaryOptions o;
  o.rotaryDim = 4;
  Tensor ids = int64s({1, 3}, {0, 99, 1});
  OpCase c = rotaryCase({1, 2, 3, 6}, {4, 2}, o, 20, ids);
  auto r = runGpuOnly(c, gpu());
  ASSERT_TRUE(r.error.empty()) << r.error;
  const float *y = r.outputs[0].data<float>(), *x = c.inputs[0].data<float>();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 0; j < 6; ++j) {
      int64_t i = (h * 3 + 1) * 6 + j; // token 1 of head h
      EXPECT_EQ(y[i], j < 4 ? 0.f : x[i]) << "head " << h << " element " << j;
    }
}

TEST(RotaryGpu, UnsupportedTypeIsAnError) {
  OpCase c = rotaryCase({1, 2, 3, 4}, {1, 3, 2}, {}, 30);
  for (size_t i = 0; i < 3; ++i) c.inputs[i] = convertTo(c.inputs[i], DType::F64);
  c.outputs[0].first = DType::F64;
  EXPECT_GPU_ERROR(c, gpu(), "unsupported element type");
}

} // namespace
} // namespace megac::gputest
