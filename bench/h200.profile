# megac machine profile: NVIDIA H200, 16 CPU threads
pcie_h2d_gbps = 55.27
pcie_d2h_gbps = 55.26
pcie_both_gbps = 89.92
pcie_pageable_h2d_gbps = 6.358
gemm_bf16_tflops = 712.1
gemm_tf32_tflops = 365.6
gemm_fp32_tflops = 51.04
gpu_hbm_gbps = 4204
attention_bf16_tflops = 204.4
host_mem_gbps = 73.73
cpu_adamw_params_per_s = 4.07e+09
cpu_adamw_under_dma_params_per_s = 2.995e+09
pcie_both_under_adamw_gbps = 70.9
gpu_mem_gib = 139.8
gpu_mem_free_gib = 139.3
# measured by megac_profile on the lent H200 on 2026-12-03 (09:03 UTC): GEMM rates are the median over a
# transformer layer's products at 16384 tokens with random operands; attention is megac's cuDNN path, forward +
# backward, fp32 in and out; the *_under_* keys: the CPU AdamW and both-way copies running at once.
