# megac machine profile: NVIDIA H200, 16 CPU threads
pcie_h2d_gbps = 55.42
pcie_d2h_gbps = 55.35
pcie_both_gbps = 101.8
pcie_pageable_h2d_gbps = 8.622
gemm_bf16_tflops = 715.9
gemm_tf32_tflops = 365.1
gemm_fp32_tflops = 51.05
gpu_hbm_gbps = 4238
attention_bf16_tflops = 204.2
host_mem_gbps = 76.22
cpu_adamw_params_per_s = 4.05e+09
gpu_mem_gib = 139.8
gpu_mem_free_gib = 139.3
# measured by megac_profile on the lent H200 on 2026-12-03: GEMM rates are the median over a
# transformer layer's products at 16384 tokens with random operands (all-zero operands had
# read 891.7 bf16 TFLOPS); attention is megac's cuDNN path, forward + backward, fp32 in and out.
