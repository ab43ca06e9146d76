// GPU tests: skip, with the reason printed, where no CUDA device is usable
// (ctest counts exit code 77 as skipped).
#include "runtime/cuda/CudaTrainer.h"

#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char **argv) {
  std::string why;
  if (!megac::cuda::cudaDeviceAvailable(&why)) {
    std::printf("SKIPPED: GPU tests need a CUDA device (%s)\n", why.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
