#!/usr/bin/env bash
# The cost model's prediction against a measured run, for one exported preset: exports it
# without weights (tools/export_shapes_only.py --preset MODEL), compiles it at batch B x seq 2048, prints
# `megac plan`'s prediction (built-in profile, or --profile FILE via PROFILE=FILE), runs STEPS
# steps with --init on random tokens and prints the median measured step (steps 2..N) and
# lanes beside the predicted ones. Issue 5 asks this for the 2.8B bench and for the largest
# model the machine's host memory holds (Llama-3.1-8B at batch 8 on the H200 machine).
#
# Run ON THE GPU MACHINE from the repo root:   bench/predict_check.sh BUILD_DIR llama8b 8
# BUILD_DIR holds megac built with CUDA (tools/gpu-build.sh stages it in .gpu). Needs torch +
# transformers for the export (the GPU machine's /opt/torch venv). FLAGS: more compile flags
# (e.g. "--resident-units 0 --gpu-mem 28"); TAG names this run's files in $OUT: TAG_steps.jsonl,
# TAG_compile.txt, TAG_plan.txt (the prediction), TAG_timeline.html (the last step measured,
# `megac run --timeline`) and TAG_run.txt (what the run printed). TAG defaults to MODEL.
# PLAN=FILE runs that compiled plan instead of compiling one (an A/B against a plan an earlier
# megac compiled; FLAGS then do nothing).
set -uo pipefail
# The inner timeouts run in the foreground (in this script's process group), so that an outer
# timeout that kills this script kills its megac too: a run left behind holds the host memory
# the next row needs.
BUILD=${1:?usage: bench/predict_check.sh BUILD_DIR MODEL [BATCH]}
MODEL=${2:?usage: bench/predict_check.sh BUILD_DIR MODEL [BATCH]}
BATCH=${3:-8}
STEPS=${STEPS:-4}
OUT=${OUT:-/tmp/megac-predict-out}
WORK=${WORK:-/tmp/megac-predict}
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=python3
CUDNN_LIB=${CUDNN_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$CUDNN_LIB:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT" "$WORK" .bench/shapes
onnx=.bench/shapes/$MODEL.onnx
prof=${PROFILE:+--profile $PROFILE}
TAG=${TAG:-$MODEL}
FLAGS=${FLAGS:-}

[ -s "$onnx" ] || timeout --foreground 300 "$PY" tools/export_shapes_only.py --preset "$MODEL" "$onnx" 2>&1 | tail -1
[ -s "$onnx" ] || { echo "predict_check.sh: export of $MODEL failed" >&2; exit 2; }
echo "== $TAG: $MODEL, batch $BATCH x 2048 $FLAGS"
if [ -n "${PLAN:-}" ]; then
  cp "$PLAN" "$WORK/p.plan" && echo "plan: $PLAN (compiled before)" > "$OUT/${TAG}_compile.txt"
  "$BUILD/megac" plan "$WORK/p.plan" | grep -m1 "vocab:" | tr -d ':' >> "$OUT/${TAG}_compile.txt"
else
# shellcheck disable=SC2086
timeout --foreground 200 "$BUILD/megac" compile "$onnx" --batch "$BATCH" --seq 2048 $prof $FLAGS -o "$WORK/p.plan" > "$OUT/${TAG}_compile.txt" 2>&1 ||
  { tail -5 "$OUT/${TAG}_compile.txt"; exit 2; }
fi
tail -2 "$OUT/${TAG}_compile.txt" | cut -c1-300
# shellcheck disable=SC2086
timeout --foreground 60 "$BUILD/megac" plan "$WORK/p.plan" $prof > "$OUT/${TAG}_plan.txt" 2>&1
grep -E "bytes per parameter|AdamW on the GPU:|resident units:|peak \(the allocation\)" "$OUT/${TAG}_plan.txt" | head -8
grep -A4 "^predicted" "$OUT/${TAG}_plan.txt"
vocab=$(grep -o "vocab [0-9]*" "$OUT/${TAG}_compile.txt" | head -1 | cut -d' ' -f2)
# Headerless tokens, as wide as megac reads them for this vocabulary (uint32 past 65536).
"$PY" -c "import numpy as np; v = ${vocab:-32000}; np.random.default_rng(0).integers(0, v, 1 << 22, dtype=np.uint32 if v > 65536 else np.uint16).tofile('$WORK/tokens.bin')"
rm -f "$OUT/${TAG}_steps.jsonl"
# shellcheck disable=SC2086
timeout --foreground 400 "$BUILD/megac" run "$WORK/p.plan" --device cuda --init --steps "$STEPS" --seed 0 $prof \
  --data "$WORK/tokens.bin" --log "$OUT/${TAG}_steps.jsonl" --timeline "$OUT/${TAG}_timeline.html" 2>&1 | tee "$OUT/${TAG}_run.txt" | tail -3
grep -o 'id="label"><b>[^<]*' "$OUT/${TAG}_timeline.html" | sed 's/.*<b>/timeline: /'
"$PY" - "$OUT/${TAG}_steps.jsonl" <<'PYEOF'
import json, statistics as st, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
timed = steps[1:] if len(steps) > 1 else steps
print(f"measured: step {st.median(s['step_s'] for s in timed):.3f} s (median of steps 2..{len(steps)}); busy: "
      + ", ".join(f"{k[:-7]} {st.median(s[k] for s in timed):.3f} s"
                  for k in ("h2d_busy_s", "compute_busy_s", "d2h_busy_s", "cpu_busy_s") if k in timed[0]))
PYEOF
