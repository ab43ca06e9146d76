#pragma once
// Trainers on a fixture's plan with its weights loaded (withWeights): the CPU backend and the CUDA runtime.
#include "../unit/FixtureTestUtil.h"
#include "runtime/cuda/CudaTrainer.h"

#include <gtest/gtest.h>

namespace megac::testing {

inline std::unique_ptr<runtime::Trainer> cpuTrainer(const plan::Plan &p) {
  return withWeights(runtime::Trainer::create(p), p);
}

inline std::unique_ptr<runtime::Trainer> gpuTrainer(const plan::Plan &p) {
  cuda::CudaOptions o;
  o.verbose = false;
  return withWeights(cuda::createCudaTrainer(p, o), p);
}

} // namespace megac::testing
