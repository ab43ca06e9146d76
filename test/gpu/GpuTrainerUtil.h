#pragma once
// Trainers on a fixture's plan with its weights loaded: the CPU backend and the CUDA runtime.
#include "../unit/FixtureTestUtil.h"
#include "runtime/cuda/CudaTrainer.h"
#include "runtime/train/Weights.h"

#include <gtest/gtest.h>

namespace megac::testing {

inline std::unique_ptr<runtime::Trainer> withWeights(llvm::Expected<std::unique_ptr<runtime::Trainer>> t,
                                                     const plan::Plan &p) {
  if (!t) {
    ADD_FAILURE() << llvm::toString(t.takeError());
    return nullptr;
  }
  auto initialized = runtime::loadInitialWeights(p, (*t)->state(), {});
  if (!initialized) {
    ADD_FAILURE() << llvm::toString(initialized.takeError());
    return nullptr;
  }
  return std::move(*t);
}

inline std::unique_ptr<runtime::Trainer> cpuTrainer(const plan::Plan &p) {
  return withWeights(runtime::Trainer::create(p), p);
}

inline std::unique_ptr<runtime::Trainer> gpuTrainer(const plan::Plan &p) {
  cuda::CudaOptions o;
  o.verbose = false;
  return withWeights(cuda::createCudaTrainer(p, o), p);
}

} // namespace megac::testing
