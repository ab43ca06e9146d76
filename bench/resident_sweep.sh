#!/usr/bin/env bash
# --resident-units on the 2.81B bench model (bench/bench2.8b.sh's) at batch 8 x seq 2048: the
# step time, the streams' busy time and the GPU memory for several counts of resident units (the
# leading units whose weights and AdamW moments stay on the GPU), each beside the cost model's
# prediction, and PyTorch all-on-the-GPU in the same call.
#
# Run ON THE GPU MACHINE from the repo root:   OUT=/some/dir bench/resident_sweep.sh BUILD_DIR
# Carried: BUILD_DIR (megac built with CUDA) and .bench/bench2.8b.onnx. COUNTS (default
# "0 2 3 4 6 auto") and STEPS (default 6; the first is not timed); PROFILE=0 skips measuring the
# machine (the built-in profile predicts), PEER=0 the PyTorch run. Results: $OUT/sweep.json and
# the table on stdout. About 3 minutes of device time.
set -uo pipefail

BUILD=${1:?usage: OUT=DIR bench/resident_sweep.sh BUILD_DIR}
OUT=${OUT:-/tmp/megac-sweep-out}
WORK=${WORK:-/tmp/megac-sweep}
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=python3
COUNTS=${COUNTS:-0 2 3 4 6 auto}
STEPS=${STEPS:-6}
MODEL=.bench/bench2.8b.onnx
CUDNN_LIB=${CUDNN_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$CUDNN_LIB:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT" "$WORK"
for f in "$BUILD/megac" "$MODEL"; do
  [ -e "$f" ] || { echo "resident_sweep.sh: $f is missing (carry it)" >&2; exit 2; }
done

prof_flag=""
if [ "${PROFILE:-1}" = 1 ] && [ -x "$BUILD/megac_profile" ] && timeout 90 "$BUILD/megac_profile" "$OUT/machine.profile" >/dev/null 2>&1; then
  prof_flag="--profile $OUT/machine.profile"
fi
"$PY" -c "import numpy as np; np.random.default_rng(0).integers(0, 32000, 1 << 22, dtype=np.uint16).tofile('$WORK/tokens.u16')"

for n in $COUNTS; do
  echo "== --resident-units $n ($(date +%T))"
  # shellcheck disable=SC2086
  if ! timeout 150 "$BUILD/megac" compile "$MODEL" --batch 8 --seq 2048 --resident-units "$n" $prof_flag \
      -o "$WORK/r.plan" > "$OUT/compile_$n.txt" 2>&1; then
    tail -3 "$OUT/compile_$n.txt"; continue
  fi
  # shellcheck disable=SC2086
  timeout 60 "$BUILD/megac" plan "$WORK/r.plan" $prof_flag > "$OUT/plan_$n.txt" 2>&1
  grep -E "^  resident units:|step time:" "$OUT/plan_$n.txt"
  rm -f "$OUT/steps_$n.jsonl"
  timeout 200 "$BUILD/megac" run "$WORK/r.plan" --device cuda --init --steps "$STEPS" --seed 0 \
    --data "$WORK/tokens.u16" --log "$OUT/steps_$n.jsonl" > "$OUT/run_$n.txt" 2>&1
  echo "run: rc $?"; grep -E "^device:|step +$STEPS/" "$OUT/run_$n.txt"
done

if [ "${PEER:-1}" = 1 ]; then
  echo "== PyTorch peer: gpu ($(date +%T))"
  OUT="$OUT" timeout 110 "$PY" bench/peer_pytorch.py gpu 2>&1 | grep -v -i "warn" | tail -3
fi

"$PY" - "$OUT" "$COUNTS" <<'PYEOF'
import json, os, re, statistics as st, sys
out, counts = sys.argv[1], sys.argv[2].split()
rows = []
for n in counts:
    def read(name):
        try:
            return open(os.path.join(out, name)).read()
        except OSError:
            return ""
    plan, run = read(f"plan_{n}.txt"), read(f"run_{n}.txt")
    steps = [json.loads(l) for l in read(f"steps_{n}.jsonl").splitlines() if l.strip()]
    timed = steps[1:] if len(steps) > 1 else steps
    res = re.search(r"^  resident units: (\d+) of|^  resident units: none", plan, re.M)
    pred = re.search(r"step time: ([0-9.]+) ms", plan)
    gib = re.search(r"^device: .*?, ([0-9.]+) GiB of its", run, re.M)
    row = {"flag": n, "resident": int(res.group(1)) if res and res.group(1) else 0,
           "planned_GiB": float(gib.group(1)) if gib else None,
           "predicted_s": float(pred.group(1)) / 1e3 if pred else None,
           "step_s": st.median(s["step_s"] for s in timed) if timed else None,
           "losses": [s["loss"] for s in steps]}
    for k in ("h2d_busy_s", "compute_busy_s", "d2h_busy_s", "cpu_busy_s"):
        row[k] = st.median(s[k] for s in timed) if timed and k in timed[0] else None
    rows.append(row)
try:
    peer = json.load(open(os.path.join(out, "baseline_gpu.json")))
except (OSError, ValueError):
    peer = None
f = lambda x, w=7, d=3: f"{x:{w}.{d}f}" if x is not None else f"{'-':>{w}}"
print(f"{'--resident-units':>16} {'units':>5} {'GiB':>6} {'predicted':>9} {'s/step':>7} {'h2d':>6} {'compute':>7} {'d2h':>6} {'cpu':>6}")
for r in rows:
    print(f"{r['flag']:>16} {r['resident']:>5} {f(r['planned_GiB'], 6, 1)} {f(r['predicted_s'], 9)} {f(r['step_s'])} "
          f"{f(r['h2d_busy_s'], 6)} {f(r['compute_busy_s'])} {f(r['d2h_busy_s'], 6)} {f(r['cpu_busy_s'], 6)}")
if peer:
    print(f"{'PyTorch all-GPU':>16} {'':>5} {peer['gpu_peak_GiB']:6.1f} {'':>9} {peer['step_s']:7.3f}")
json.dump({"rows": rows, "pytorch_gpu": peer}, open(os.path.join(out, "sweep.json"), "w"), indent=1)
PYEOF
