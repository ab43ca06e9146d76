#pragma once
// Trains a plan on one GPU, the MegaTrain way: fp32 master weights and AdamW
// moments stay in pinned host memory; each unit's weights stream in (H2D)
// just before use and its gradients stream out (D2H) right after its
// backward, on three CUDA streams linked by the events of the plan's
// StreamSchedule, which this runtime follows action by action; the CPU
// updates each unit with AdamW while the GPU works on earlier units. Resident
// units (codegen/ResidentPolicy.h) keep weights and moments on the GPU and
// step there; Trainer::state() brings their state to the host arrays.
#include "runtime/train/Trainer.h"

namespace megac::cuda {

struct CudaOptions {
  int device = 0;
  bool verbose = true; // prints the device and the memory it takes
  bool opProfile = false; // times every op (report() prints GPU time by op type)
};

// True where a CUDA device is usable; `why` says why not.
bool cudaDeviceAvailable(std::string *why);

llvm::Expected<std::unique_ptr<runtime::Trainer>> createCudaTrainer(const plan::Plan &plan, const CudaOptions &opts);

} // namespace megac::cuda
