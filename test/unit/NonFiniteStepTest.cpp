// A NaN gradient stops the step before its unit's update (NonFiniteStep.h),
// on the CPU stream executor and on the direct CPU path.
#include "NonFiniteStep.h"

using namespace megac;

TEST(NonFiniteStep, ANanGradientStopsTheStepBeforeItsUnitsUpdate) {
  megac::testing::checkNanStopsTheStep([](const plan::Plan &p) { return runtime::Trainer::create(p); });
}

TEST(NonFiniteStep, UnitsSteppedOnTheDeviceWhileTheyStreamStopTheSame) {
  megac::testing::checkNanStopsTheStep([](const plan::Plan &p) { return runtime::Trainer::create(p); },
                                       /*gpuAdamw=*/true);
}

TEST(NonFiniteStep, TheDirectPathStopsTheSame) {
  runtime::CpuOptions o;
  o.streamSchedule = false;
  megac::testing::checkNanStopsTheStep([o](const plan::Plan &p) { return runtime::Trainer::create(p, o); });
}
