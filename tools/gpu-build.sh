#!/usr/bin/env bash
# Builds the CUDA megac here (nvcc, sm_90) and stages what the GPU machine
# needs in .gpu/ (stripped binaries: megac, the GPU tests, the profiler), and
# the same packed in .gpu.txz (9 MB instead of 47: what a device call carries,
# whose working tree is limited to 64 MiB). On the GPU machine
# `tools/gpu-unpack.sh` unpacks it into .gpu/ (tools/gpu-check.sh does it
# itself): with the device tool, command "tools/gpu-check.sh", carry [".gpu.txz"].
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$BUILD" -j"${JOBS:-2}" megac megac_gpu_tests megac_profile
rm -rf .gpu && mkdir -p .gpu
for b in megac test/megac_gpu_tests megac_profile; do
  cp "$BUILD/$b" .gpu/ && strip -s ".gpu/$(basename "$b")"
done
tar -C .gpu -cf - megac megac_gpu_tests megac_profile | xz -6 -T"${JOBS:-2}" >.gpu.txz
du -sh .gpu .gpu.txz
