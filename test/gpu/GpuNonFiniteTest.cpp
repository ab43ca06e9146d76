// The check of the gradients on the GPU (runtime/cuda/FiniteCheckKernels.h):
// a NaN in one unit's gradients stops the step before that unit's update,
// streamed or resident, as on the CPU backend (NonFiniteStep.h).
#include "../unit/NonFiniteStep.h"
#include "GpuTrainerUtil.h"

using namespace megac;

TEST(GpuNonFiniteStep, ANanGradientStopsTheStepBeforeItsUnitsUpdate) {
  megac::testing::checkNanStopsTheStep(megac::testing::quietCudaTrainer);
}

TEST(GpuNonFiniteStep, UnitsSteppedOnTheGpuWhileTheyStreamStopTheSame) {
  megac::testing::checkNanStopsTheStep(megac::testing::quietCudaTrainer, /*gpuAdamw=*/true);
}
