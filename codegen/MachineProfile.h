#pragma once
// A machine profile: what the cost model and the planner know of the machine
// a plan is made for. The file format (bench/h200.profile, written by
// megac_profile) is one `key = value` per line; `#` starts a comment. The
// built-in default is the lent H200's profile, measured 2026-12-04 (bench/h200.profile).
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace megac::plan {

struct MachineProfile {
  std::string description = "NVIDIA H200, 16 CPU threads (built in: bench/h200.profile)";
  double pcieH2dGBps = 55.5;          // pcie_h2d_gbps: pinned host -> device
  double pcieD2hGBps = 55.33;         // pcie_d2h_gbps: device -> pinned host
  double pcieBothGBps = 97.1;         // pcie_both_gbps: both directions at once, summed
  double pciePageableH2dGBps = 8.169; // pcie_pageable_h2d_gbps
  double gemmBf16Tflops = 709.4;      // gemm_bf16_tflops: cuBLASLt, fp32 accumulation
  double gemmTf32Tflops = 365.5;      // gemm_tf32_tflops
  double gemmFp32Tflops = 51.01;      // gemm_fp32_tflops
  double hostMemGBps = 77.08;         // host_mem_gbps: host memcpy
  double cpuAdamwParamsPerS = 4.918e9; // cpu_adamw_params_per_s
  double gpuMemGiB = 139.8;           // gpu_mem_gib: the device's total memory
  double gpuMemFreeGiB = 139.3;       // gpu_mem_free_gib: free when measured: what a plan may use
  // gpu_hbm_gbps (optional): device memory bandwidth (a device-to-device
  // copy, read + write) the cost model gives memory-bound ops.
  double gpuHbmGBps = 4228;
  // attention_bf16_tflops (optional): what megac's bf16 attention (cuDNN's
  // fused SDPA, with its fp32<->bf16 conversions) achieves forward plus
  // backward, in the cost model's attention flops (CostModel.cpp), at long
  // sequences (see attention_bf16_ps_per_elem): 631 on the H200.
  double attentionBf16Tflops = 631.4;
  // attention_bf16_ps_per_elem (optional): what that attention's forward
  // plus backward (on the forward's stashed residue) takes beyond its flops
  // at attention_bf16_tflops, per element of Q ([B, Hq, S, D]): conversions,
  // dQ's accumulator. Without it (0), the rate is one shape's, overhead
  // included (203 on the H200 at batch 4 x seq 4096: 50% slow at seq 32768).
  double attentionBf16PsPerElem = 63.38;
  // cpu_adamw_under_dma_params_per_s and pcie_both_under_adamw_gbps
  // (optional; 0: not measured): the CPU AdamW and both-way pinned copies
  // measured running at once, as the backward runs them. They share the
  // host's memory bandwidth, so each goes slower than alone.
  double cpuAdamwUnderDmaParamsPerS = 3.134e9;
  double pcieBothUnderAdamwGBps = 69.02;
  // gpus and pcie_all_gpus_both_gbps (optional; 0: not measured): the
  // machine's GPUs, and both-way pinned copies to and from all of them at
  // once, summed: what N GPUs of a `--gpus N` plan share (each GPU's copies
  // then run at most pcie_all_gpus_both_gbps / N). The built-in profile's
  // machine has one GPU.
  double gpus = 1;
  double pcieAllGpusBothGBps = 0;

  // The GPU memory a plan may use by default (--gpu-mem): the free memory.
  int64_t usableGpuBytes() const { return gibToBytes(gpuMemFreeGiB); }
  static int64_t gibToBytes(double gib) { return int64_t(gib * double(int64_t(1) << 30)); }
};

// Parses the text of a profile. Every key above must be present exactly
// once (gpu_hbm_gbps and attention_bf16_tflops may be left out, and the two
// *_under_* keys, then 0); an unknown key, a value that is not a positive number or a line
// without `=` is an error naming `source` and the line.
llvm::Expected<MachineProfile> parseMachineProfile(llvm::StringRef text, llvm::StringRef source);
llvm::Expected<MachineProfile> readMachineProfile(const std::string &path);

} // namespace megac::plan
