#!/usr/bin/env bash
# What the NaN/Inf check of each unit's gradients before its host AdamW costs (issue 20), on the
# 2.8B bench model at batch 8 x seq 2048 (tools/export_shapes_only.py --preset bench2.8b), in one run:
#   - `--resident-units 0` (every unit streams, its AdamW on the CPU: where the check can cost):
#     one plan, run with the check and with `megac run --no-finite-check`;
#   - `--resident-units auto`: compiled with the check and with --no-finite-check (the cost model
#     prices the check on the CPU lane, so the planner may keep another set of units resident).
# Each row: median s/step of steps 2..STEPS, the lanes' median busy seconds, the cost model's
# prediction for the plan (megac plan --profile bench/h200.profile).
#
# Run ON THE GPU MACHINE from the repo root:   OUT=/some/dir bench/finite_check_cost.sh BUILD_DIR
# BUILD_DIR: megac built with CUDA (tools/gpu-build.sh stages it in .gpu). The export needs torch
# (PY, default the GPU machine's /opt/torch venv). Plans and data stay in $WORK (default
# /tmp/megac-finite). About 4 minutes: export ~0.5, 3 compiles ~1, 4 runs of STEPS=6 steps ~2.5.
# STREAM_ONLY=1: the two --resident-units 0 rows alone (about 2 minutes).
set -uo pipefail
BUILD=${1:?usage: OUT=DIR bench/finite_check_cost.sh BUILD_DIR}
OUT=${OUT:-/tmp/megac-finite-out}
WORK=${WORK:-/tmp/megac-finite}
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=python3
STEPS=${STEPS:-6}
MEGAC=$BUILD/megac
CUDNN_LIB=${CUDNN_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$CUDNN_LIB:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT" "$WORK"
rm -f "$OUT"/finite_*.jsonl "$OUT"/finite_*.log "$OUT"/finite_check_cost.json

MODEL=$WORK/bench2.8b.onnx
if [ ! -s "$MODEL" ]; then
  t0=$SECONDS
  timeout 240 "$PY" tools/export_shapes_only.py --preset bench2.8b "$MODEL" >"$OUT/finite_export.log" 2>&1 ||
    { echo "export failed:"; tail -5 "$OUT/finite_export.log"; exit 1; }
  echo "export: $((SECONDS - t0)) s"
fi
"$PY" -c "import numpy as np; np.random.default_rng(0).integers(0, 32000, 1 << 22, dtype=np.uint16).tofile('$WORK/tokens.u16')"

# plan NAME FLAGS...: compile in the background (CPU work overlaps the GPU runs).
compile() {
  local name=$1 t0=$SECONDS
  shift
  timeout 200 "$MEGAC" compile "$MODEL" --batch 8 --seq 2048 "$@" -o "$WORK/$name.plan" >"$OUT/finite_compile_$name.log" 2>&1
  echo "compile $name ($*): rc $?, $((SECONDS - t0)) s" >>"$OUT/finite_compile_$name.log"
}
compile stream --resident-units 0 &
c1=$!
c2= c3=
if [ "${STREAM_ONLY:-0}" != 1 ]; then
  compile auto_check --resident-units auto &
  c2=$!
  compile auto_nocheck --resident-units auto --no-finite-check &
  c3=$!
fi

# run NAME PLAN FLAGS...
run() {
  local name=$1 plan=$2
  shift 2
  timeout 150 "$MEGAC" run "$WORK/$plan.plan" --device cuda --init --seed 0 --steps "$STEPS" --data "$WORK/tokens.u16" \
    --log "$OUT/finite_$name.jsonl" "$@" >"$OUT/finite_$name.log" 2>&1
  echo "run $name: rc $?"
  grep -E "^device|step +[0-9]+ " "$OUT/finite_$name.log" | tail -3
}
wait $c1; tail -1 "$OUT/finite_compile_stream.log"
run stream_check stream
run stream_nocheck stream --no-finite-check
if [ "${STREAM_ONLY:-0}" != 1 ]; then
  wait $c2 $c3; tail -1 "$OUT/finite_compile_auto_check.log"; tail -1 "$OUT/finite_compile_auto_nocheck.log"
  run auto_check auto_check
  run auto_nocheck auto_nocheck
fi

for p in stream auto_check auto_nocheck; do
  [ -s "$WORK/$p.plan" ] || continue
  "$MEGAC" plan "$WORK/$p.plan" --profile bench/h200.profile 2>/dev/null | grep -i -E "predict|resident" | head -4 \
    >"$OUT/finite_predict_$p.txt"
done

"$PY" - "$OUT" <<'EOF'
import json, os, statistics as st, sys
out = sys.argv[1]
rows, res = [], {}
for name, plan, label in (("stream_check", "stream", "--resident-units 0, check on"),
                          ("stream_nocheck", "stream", "--resident-units 0, run --no-finite-check"),
                          ("auto_check", "auto_check", "--resident-units auto, check on"),
                          ("auto_nocheck", "auto_nocheck", "--resident-units auto, compiled --no-finite-check")):
    try:
        steps = [json.loads(l) for l in open(os.path.join(out, f"finite_{name}.jsonl")) if l.strip()]
    except OSError:
        steps = []
    timed = steps[1:]
    r = None
    if timed and "step_s" in timed[0]:
        r = {"step_s": st.median(s["step_s"] for s in timed),
             "busy": {k[:-7]: st.median(s[k] for s in timed) for k in ("h2d_busy_s", "compute_busy_s", "d2h_busy_s", "cpu_busy_s")},
             "losses": [s["loss"] for s in steps]}
    try:
        r and r.update(predicted=open(os.path.join(out, f"finite_predict_{plan}.txt")).read().strip())
    except OSError:
        pass
    res[name] = r
    rows.append((label, r))
print(f"\n{'2.8B bench, 8 x 2048, H200':<52} {'s/step':>7} {'compute':>8} {'h2d':>6} {'d2h':>6} {'cpu':>6}")
for label, r in rows:
    if not r:
        print(f"{label:<52} {'failed':>7}")
        continue
    b = r["busy"]
    print(f"{label:<52} {r['step_s']:7.3f} {b['compute']:8.3f} {b['h2d']:6.3f} {b['d2h']:6.3f} {b['cpu']:6.3f}")
for a, b in (("stream_check", "stream_nocheck"), ("auto_check", "auto_nocheck")):
    if res.get(a) and res.get(b):
        print(f"check cost, {a.split('_')[0]}: {100 * (res[a]['step_s'] / res[b]['step_s'] - 1):+.1f}% step, "
              f"cpu lane {res[a]['busy']['cpu'] - res[b]['busy']['cpu']:+.3f} s")
for name, r in res.items():
    if r and r.get("predicted"):
        print(f"predicted ({name}): " + r["predicted"].replace("\n", " | "))
json.dump(res, open(os.path.join(out, "finite_check_cost.json"), "w"), indent=1)
EOF
