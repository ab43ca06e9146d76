// CUDA kernels of megac.SwiGLU and megac.SwiGLUGrad
// (runtime/cuda/SwiGLUKernels.cu) against the CPU kernels: f32 at sizes that
// take the 4-wide path and its scalar tail (and a misaligned view of it),
// f64, f16/bf16 computed in f32, the gradient with one output left out, and
// the refusal of operands of different shapes.
#include "RowOpsTestUtil.h"

namespace megac::gputest {
namespace {

OpCase swigluCase(const Shape &s, DType dt, unsigned seed) {
  OpCase c;
  c.op = "megac.SwiGLU";
  c.inputs = {randomTensor(s, seed, dt, -8, 8), randomTensor(s, seed + 1, dt, -2, 2)};
  c.outputs = {{dt, s}};
  return c;
}

OpCase swigluGradCase(const Shape &s, DType dt, unsigned seed) {
  OpCase c;
  c.op = "megac.SwiGLUGrad";
  c.inputs = {randomTensor(s, seed, dt), randomTensor(s, seed + 1, dt, -8, 8), randomTensor(s, seed + 2, dt, -2, 2)};
  c.outputs = {{dt, s}, {dt, s}};
  return c;
}

TEST(SwiGLUGpu, ForwardAndGradF32) {
  for (const Shape &s : {Shape{1}, Shape{3, 5, 7}, Shape{4, 1024}, Shape{1000003}}) {
    SCOPED_TRACE(shapeToString(s));
    EXPECT_GPU_MATCHES_CPU(swigluCase(s, DType::F32, 10), gpu(), 1e-5);
    EXPECT_GPU_MATCHES_CPU(swigluGradCase(s, DType::F32, 20), gpu(), 1e-5);
  }
}

TEST(SwiGLUGpu, F64AndHalfTypes) {
  EXPECT_GPU_MATCHES_CPU(swigluCase({4, 9}, DType::F64, 30), gpu(), 1e-12);
  EXPECT_GPU_MATCHES_CPU(swigluGradCase({4, 9}, DType::F64, 40), gpu(), 1e-12);
  for (DType dt : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtypeName(dt));
    // One rounding of the result to the half type (the inputs are exact).
    const double tol = dt == DType::F16 ? 1e-2 : 6e-2;
    EXPECT_GPU_MATCHES_CPU(swigluCase({3, 37}, dt, 50), gpu(), tol);
    EXPECT_GPU_MATCHES_CPU(swigluGradCase({3, 37}, dt, 60), gpu(), tol);
  }
}

TEST(SwiGLUGpu, GradWithOneOutputLeftOut) {
  for (size_t unused : {0, 1}) {
    OpCase c = swigluGradCase({5, 13}, DType::F32, 70);
    c.outputs[unused].first = DType::Undefined;
    EXPECT_GPU_MATCHES_CPU(c, gpu(), 1e-5);
  }
}

TEST(SwiGLUGpu, RefusesMismatchedShapes) {
  OpCase c = swigluCase({4, 8}, DType::F32, 80);
  c.inputs[1] = randomTensor({8}, 81);
  auto r = runOnBoth(c, gpu());
  EXPECT_FALSE(r.error.empty());
}

} // namespace
} // namespace megac::gputest
