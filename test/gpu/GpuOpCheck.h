#pragma once
// Runs one op on the CPU reference kernel and on its CUDA kernel with the same
// inputs and compares the outputs. The CPU kernels are tested against
// hand-computed values and finite differences (test/unit); here they are the
// reference for the GPU.
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/GpuKernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace megac::gputest {

inline Tensor randomTensor(Shape s, unsigned seed, DType dt = DType::F32, double lo = -1, double hi = 1) {
  Tensor t(dt, std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.setFromDouble(i, isFloatType(dt) ? d(rng) : std::floor(d(rng)));
  return t;
}

struct OpCase {
  std::string op;
  Attrs attrs;
  std::vector<Tensor> inputs;          // an undefined Tensor: omitted optional input
  std::vector<bool> constant;          // input i is a plan constant (host copy given to the kernel)
  std::vector<std::pair<DType, Shape>> outputs; // DType::Undefined: unused output
  cuda::ComputeMode mode = cuda::ComputeMode::FP32;
};

struct OpResult {
  std::vector<Tensor> cpu, gpu;
  double maxRelError = 0; // max |gpu - cpu| / (1 + |cpu|) over all outputs
  std::string error;      // non-empty if either side failed
};

// Owns a cuBLASLt handle, a cuDNN handle (where megac has cuDNN), a stream
// and a GEMM workspace for the tests.
class GpuTestContext {
public:
  GpuTestContext();
  ~GpuTestContext();
  cuda::GpuContext &get() { return ctx_; }

private:
  cuda::GpuContext ctx_;
};

// The test binary's context (created on first use, after main has checked
// that a GPU exists).
GpuTestContext &gpu();

OpResult runOnBoth(const OpCase &c, GpuTestContext &gpu);

struct GpuOnlyResult {
  std::vector<Tensor> outputs; // an undefined Tensor for an unused output
  std::string error;
};

// Runs only the CUDA kernel of the case (outputs poisoned with 0xff first).
GpuOnlyResult runGpuOnly(const OpCase &c, GpuTestContext &gpu);

// While alive, the CPU kernels' products round their operands to bf16 as the
// GPU's bf16 mode packs them (fp32 accumulation on both sides), so a bf16
// GPU kernel can be held to fp32 summation-order tolerances.
class ScopedCpuBf16Operands {
public:
  ScopedCpuBf16Operands() : saved_(cpu::sgemmOperandRounding()) {
    cpu::setSgemmOperandRounding(cpu::OperandRounding::Bf16);
  }
  ~ScopedCpuBf16Operands() { cpu::setSgemmOperandRounding(saved_); }

private:
  cpu::OperandRounding saved_;
};

} // namespace megac::gputest

// Expects the op to run on both backends and agree within `tol`.
#define EXPECT_GPU_MATCHES_CPU(opcase, ctx, tol)                                                                  \
  do {                                                                                                           \
    auto r_ = ::megac::gputest::runOnBoth((opcase), (ctx));                                                      \
    ASSERT_TRUE(r_.error.empty()) << r_.error;                                                                   \
    EXPECT_LE(r_.maxRelError, (tol)) << (opcase).op;                                                             \
  } while (0)
