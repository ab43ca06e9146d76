#!/usr/bin/env bash
# Builds the CUDA megac here (nvcc, sm_90) and stages what the GPU machine
# needs in .gpu/ (stripped binaries: megac, the GPU tests, the profiler).
# Then run tools/gpu-check.sh on the GPU machine with .gpu carried, e.g. with
# the device tool: command "tools/gpu-check.sh", carry [".gpu"].
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$BUILD" -j"${JOBS:-2}" megac megac_gpu_tests megac_profile
rm -rf .gpu && mkdir -p .gpu
for b in megac test/megac_gpu_tests megac_profile; do
  cp "$BUILD/$b" .gpu/ && strip -s ".gpu/$(basename "$b")"
done
du -sh .gpu
