# megac machine profile: NVIDIA H200, 16 CPU threads
pcie_h2d_gbps = 55.5
pcie_d2h_gbps = 55.33
pcie_both_gbps = 97.1
pcie_pageable_h2d_gbps = 8.169
gemm_bf16_tflops = 709.4
gemm_tf32_tflops = 365.5
gemm_fp32_tflops = 51.01
gpu_hbm_gbps = 4228
attention_bf16_tflops = 631.4
attention_bf16_ps_per_elem = 63.38
host_mem_gbps = 77.08
cpu_adamw_params_per_s = 4.918e+09
cpu_adamw_under_dma_params_per_s = 3.134e+09
pcie_both_under_adamw_gbps = 69.02
gpu_mem_gib = 139.8
gpu_mem_free_gib = 139.3
# measured by megac_profile on the lent H200 on 2026-12-04 (01:21 UTC), in the bench2.8b.sh run of that time: GEMM rates
# are the median over a transformer layer's products at 16384 tokens with random operands; attention is megac's cuDNN
# path, forward + backward, fp32 in and out; the *_under_* keys: the CPU AdamW and both-way copies running at once.
# attention_bf16_* from megac_profile's two-shape measurement on the lent H200 on 2026-12-04 (06:48 UTC, bench2.8b.sh):
# causal batch 4 x seq 4096 and batch 1 x seq 16384 separate the flop rate from the work per element of Q, the backward
# on the forward's stashed residue as the runtime runs it. Its other keys (that host's CPU AdamW 5.1 G params/s, memcpy
# 80 GB/s) are left at the 01:21 figures: hosts differ more than GPUs.
