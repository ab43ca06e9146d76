#!/usr/bin/env bash
# Long context: the Llama-shaped 2.81B model of bench2.8b.sh at batch 1 x seq 32768 (BATCH, SEQ
# to change) on the GPU machine. megac reads the export's causal mask from its ops (is_causal,
# cuDNN's fused attention) and, where the plan would not fit the GPU, offloads the first units'
# checkpoints to pinned host memory and runs the MLP blocks over slices of the sequence (both
# auto); beside it, PyTorch with everything on the GPU (sdpa, bf16 autocast, gradient
# checkpointing), measured in the same call.
# TEXT=FILE trains megac on that file's bytes (--text) instead of random tokens (issue 24 asks
# /usr/share/common-licenses/GPL-3 eight times over at 262,144). PEER_LONGEST=1 also finds
# PyTorch's longest length, doubling from 32,768 (one timed step each) until one fails.
#
# Run ON THE GPU MACHINE from the repo root:   OUT=/some/dir bench/long_seq.sh BUILD_DIR
# It needs, carried into the repo: BUILD_DIR (megac built with CUDA) and .bench/bench2.8b.onnx
# (tools/export_shapes_only.py --preset bench2.8b .bench/bench2.8b.onnx). About 3 minutes.
set -uo pipefail

BUILD=${1:?usage: OUT=DIR bench/long_seq.sh BUILD_DIR}
OUT=${OUT:-/tmp/megac-long-out}
WORK=${WORK:-/tmp/megac-long}
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=python3
BATCH=${BATCH:-1}
SEQ=${SEQ:-32768}
STEPS=${STEPS:-4}
MODEL=.bench/bench2.8b.onnx
CUDNN_LIB=${CUDNN_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$CUDNN_LIB:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT" "$WORK"
for f in "$BUILD/megac" "$MODEL" bench/peer_pytorch.py; do
  [ -e "$f" ] || { echo "long_seq.sh: $f is missing (carry it: see the header of $0)" >&2; exit 2; }
done
stage() { echo; echo "== $1 ($(date +%T))"; }

stage "megac compile (batch $BATCH x seq $SEQ)"
t0=$SECONDS
timeout 240 "$BUILD/megac" compile "$MODEL" --batch "$BATCH" --seq "$SEQ" -o "$WORK/l.plan" 2>&1 | tail -4
compile_rc=${PIPESTATUS[0]}
echo "compile: rc $compile_rc, $((SECONDS - t0)) s"
[ "$compile_rc" = 0 ] && "$BUILD/megac" plan "$WORK/l.plan" 2>&1 | grep -E "workspace:|peak \(the|step time|sequence chunks|offloaded" | head -6

run_rc=1
if [ "$compile_rc" = 0 ]; then
  stage "megac run ($STEPS steps, --init, --device cuda)"
  if [ -n "${TEXT:-}" ]; then
    data=(--text "$TEXT")
  else
    "$PY" -c "import numpy as np; np.random.default_rng(0).integers(0, 32000, 1 << 22, dtype=np.uint16).tofile('$WORK/tokens.u16')"
    data=(--data "$WORK/tokens.u16")
  fi
  timeout 900 "$BUILD/megac" run "$WORK/l.plan" --device cuda --init --steps "$STEPS" --seed 0 \
    "${data[@]}" --log "$OUT/megac_long_steps.jsonl" --timeline "$OUT/megac_long_timeline.html" 2>&1 | tail -n $((STEPS + 6))
  run_rc=${PIPESTATUS[0]}
  echo "run: rc $run_rc"
fi

stage "PyTorch peer: gpu at batch $BATCH x seq $SEQ (5 steps, the first one not timed)"
BATCH=$BATCH SEQ=$SEQ OUT="$OUT" timeout 600 "$PY" bench/peer_pytorch.py gpu 2>&1 | grep -v -i "warn" | tail -4
echo "peer gpu: rc ${PIPESTATUS[0]}"
cp "$OUT/baseline_gpu.json" "$OUT/baseline_gpu_at_seq.json" 2>/dev/null
if [ "${PEER_LONGEST:-0}" = 1 ]; then
  for seq in 32768 65536 131072 262144 524288; do
    stage "PyTorch peer: longest length, batch 1 x seq $seq (one timed step)"
    BATCH=1 SEQ=$seq PEER_STEPS=1 OUT="$WORK" timeout 900 "$PY" bench/peer_pytorch.py gpu > "$OUT/peer_longest_$seq.txt" 2>&1
    rc=$?
    grep -v -i warn "$OUT/peer_longest_$seq.txt" | tail -1 | cut -c1-300
    [ "$rc" = 0 ] || { echo "PyTorch stops at $seq (rc $rc): its longest is the length before"; break; }
  done
fi
cp "$OUT/baseline_gpu_at_seq.json" "$OUT/baseline_gpu.json" 2>/dev/null

stage "summary"
"$PY" - "$OUT" "$BATCH" "$SEQ" <<'EOF'
import json, os, statistics as st, sys
out, batch, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(name):
    try:
        return [json.loads(l) for l in open(os.path.join(out, name)) if l.strip()]
    except (OSError, ValueError):
        return []
timed = load("megac_long_steps.jsonl")[1:]  # the first step pays for warm-up
peer = (load("baseline_gpu.json") or [{}])[0]
print(f"batch {batch} x seq {seq}: {'s/step':>8} {'tok/s':>8}")
rows = [("megac, weights streamed from host", st.median(s["step_s"] for s in timed) if timed else None),
        ("PyTorch, all on the GPU (bf16 autocast)", peer.get("step_s"))]
for label, s in rows:
    print(f"{label:<42} {s:8.3f} {batch * seq / s:8.0f}" if s else f"{label:<42} {'failed':>8}")
if timed:
    print("megac stream busy per step (s, median): " + ", ".join(
        f"{k[:-7]} {st.median(s[k] for s in timed):.3f}" for k in ("h2d_busy_s", "compute_busy_s", "d2h_busy_s", "cpu_busy_s")
        if k in timed[0]))
if peer:
    print(f"PyTorch GPU peak {peer.get('gpu_peak_GiB')} GiB")
EOF
