// The check of the gradients on the GPU (runtime/cuda/FiniteCheckKernels.h):
// a NaN in one unit's gradients stops the step before that unit's update,
// streamed or resident, as on the CPU backend (NonFiniteStep.h).
#include "../unit/NonFiniteStep.h"
#include "runtime/cuda/CudaTrainer.h"

using namespace megac;

TEST(GpuNonFiniteStep, ANanGradientStopsTheStepBeforeItsUnitsUpdate) {
  megac::testing::checkNanStopsTheStep([](const plan::Plan &p) {
    cuda::CudaOptions o;
    o.verbose = false;
    return cuda::createCudaTrainer(p, o);
  });
}

TEST(GpuNonFiniteStep, UnitsSteppedOnTheGpuWhileTheyStreamStopTheSame) {
  megac::testing::checkNanStopsTheStep(
      [](const plan::Plan &p) {
        cuda::CudaOptions o;
        o.verbose = false;
        return cuda::createCudaTrainer(p, o);
      },
      /*gpuAdamw=*/true);
}
