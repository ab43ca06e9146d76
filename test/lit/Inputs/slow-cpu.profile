# megac machine profile: slow CPU (test)
# Everything fast but the CPU optimizer: 1e6 parameters/s.
pcie_h2d_gbps = 1000
pcie_d2h_gbps = 1000
pcie_both_gbps = 2000
pcie_pageable_h2d_gbps = 100
gemm_bf16_tflops = 1000
gemm_tf32_tflops = 1000
gemm_fp32_tflops = 1000
host_mem_gbps = 100
cpu_adamw_params_per_s = 1e6
gpu_mem_gib = 80
gpu_mem_free_gib = 79
gpu_hbm_gbps = 100000
