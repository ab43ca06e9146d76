#pragma once
// Trainers on a fixture's plan with its weights loaded (withWeights): the CPU backend and the CUDA runtime.
#include "../unit/FixtureTestUtil.h"
#include "runtime/cuda/CudaTrainer.h"

#include <gtest/gtest.h>

namespace megac::testing {

inline std::unique_ptr<runtime::Trainer> cpuTrainer(const plan::Plan &p) {
  return withWeights(runtime::Trainer::create(p), p);
}

// The CUDA runtime without its start-up lines: the factory the shared checks take.
inline llvm::Expected<std::unique_ptr<runtime::Trainer>> quietCudaTrainer(const plan::Plan &p) {
  cuda::CudaOptions o;
  o.verbose = false;
  return cuda::createCudaTrainer(p, o);
}

inline std::unique_ptr<runtime::Trainer> gpuTrainer(const plan::Plan &p) { return withWeights(quietCudaTrainer(p), p); }

} // namespace megac::testing
