# megac machine profile: a tiny GPU for tests (bench/h200.profile with 0.03241 GiB free)
pcie_h2d_gbps = 55.41
pcie_d2h_gbps = 55.28
pcie_both_gbps = 99.66
pcie_pageable_h2d_gbps = 7.017
gemm_bf16_tflops = 891.7
gemm_tf32_tflops = 450.3
gemm_fp32_tflops = 51.08
host_mem_gbps = 72.69
cpu_adamw_params_per_s = 4.127e+09
gpu_mem_gib = 139.8
gpu_mem_free_gib = 0.03241
# cpu_adamw re-measured after the AVX-512/AVX2 clones (same day); torch fused 3.843e+09 in that run
