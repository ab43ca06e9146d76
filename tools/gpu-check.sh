#!/usr/bin/env bash
# On the GPU machine, from the repo root, with .gpu/ from tools/gpu-build.sh:
# the GPU tests (ctest label gpu runs the same binary), then compute-sanitizer
# memcheck and racecheck on a short fixture run where the machine allows it.
# Exits nonzero when a test fails or a sanitizer reports anything not listed
# in tools/sanitizer-known.txt.
# Usage: tools/gpu-check.sh [gtest filter]
set -uo pipefail
cd "$(dirname "$0")/.."
tools/gpu-unpack.sh
CUDNN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$CUDNN:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/megac-gpu}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
status=0
.gpu/megac_gpu_tests --gtest_brief=1 ${1:+--gtest_filter=$1} 2>&1 | tee "$OUT/gpu_tests.txt" | tail -60 || status=1
[ "${PIPESTATUS[0]}" = 0 ] || status=1
if [ "${SANITIZE:-1}" = 1 ]; then
  SAN=/usr/local/cuda/bin/compute-sanitizer
  # fp32 (megac's own kernels), bf16 at seq 64 (cuDNN's fused attention) and fp32 with resident units.
  .gpu/megac compile test/data/llama/model.onnx --batch 2 --seq 16 --compute fp32 --resident-units 0 -o "$OUT/llama.plan" >/dev/null
  .gpu/megac compile test/data/llama/model.onnx --batch 2 --seq 64 --compute bf16 --resident-units 0 -o "$OUT/llama-bf16.plan" >/dev/null
  # Resident embed and layer.0: their AdamW on the compute stream.
  .gpu/megac compile test/data/llama/model.onnx --batch 2 --seq 16 --compute fp32 --resident-units 2 \
    -o "$OUT/llama-resident.plan" >/dev/null
  for tool in memcheck racecheck; do
    for plan in llama llama-bf16 llama-resident; do
      data="--input test/data/llama/ref/input_ids.pb --targets test/data/llama/ref/targets.pb"
      [ "$plan" = llama-bf16 ] && data="--text README.md"
      echo "== compute-sanitizer --tool $tool ($plan, 2 steps)"
      log="$OUT/sanitizer-$tool-$plan.txt"
      # shellcheck disable=SC2086
      timeout 300 $SAN --tool $tool --error-exitcode 9 .gpu/megac run "$OUT/$plan.plan" --device cuda --steps 2 $data >"$log" 2>&1
      rc=$?
      tail -8 "$log"
      echo "exit: $rc"
      [ "$rc" = 0 ] && continue
      # Accepted only where every kernel the reports name is listed in
      # tools/sanitizer-known.txt (inside cuDNN, not megac's to fix).
      verdict=$(tools/sanitizer-triage.sh "$log")
      [ $? = 0 ] || status=1
      echo "compute-sanitizer $tool ($plan): $verdict"
    done
  done
fi
exit $status
