#!/usr/bin/env bash
# Issue 5's first figure: the step time of the Llama-shaped 2.81B model (hidden 3072, 26 layers,
# 24 heads, 8 kv heads, intermediate 8192, vocab 32000, untied head) at batch 8 x seq 2048 on the
# GPU machine, megac (weights streamed from host memory, initialized by megac) beside PyTorch's
# two peers measured in the same call: everything resident on the GPU (bf16 autocast, fused
# AdamW), and FSDP2 with CPU offload and the fused CPU AdamW.
#
# Run ON THE GPU MACHINE from the repo root:   OUT=/some/dir bench/bench2.8b.sh BUILD_DIR
# It needs, carried into the repo (ignored paths):
#   BUILD_DIR                 megac built with CUDA (e.g. .dev/build-cuda)
#   .bench/bench2.8b.onnx     tools/export_shapes_only.py --preset bench2.8b .bench/bench2.8b.onnx
# Results in $OUT: megac_steps.jsonl, megac_{stream_cpu_adamw,stream,stream_accum,stream_accum_passes}_steps.jsonl, predict_*.txt,
# baseline_gpu.json, baseline_fsdp_fused.json, baseline_deepspeed.json, bench2.8b.json, and the table
# on stdout. The plan (~270 MB) stays in $WORK (default /tmp/megac-bench) so it
# does not travel back. About 3-4 minutes of device time; every stage has its own time limit (670 s in all at most).
#
# Rows beside the default plan (STREAMED=1, the default): every unit streamed (`--resident-units 0`),
# with the AdamW of every unit on the host (`--gpu-adamw-units 0`) and as the GPU-AdamW policy
# chooses, and with `--grad-accum 8` (131k tokens a step; ACCUM_STEPS=3 steps) in one pass (each unit
# streams in once a step) and in 8 passes (`--micro-batches-per-pass 1`). GPU_MEM=G adds
# `--gpu-mem G` to every compile (an H100: 70; the built-in profile is the H200's). The DeepSpeed ZeRO-3
# offload peer (bench/peer_deepspeed.py) runs where .whl/ was carried (bench/fetch_deepspeed.sh
# here; DEEPSPEED=0 skips it): about 4 more minutes. With every row and peer the script needs more
# than one 600 s device call: PEERS=0 or STREAMED=0 split it.
#
# ROWS: which of those rows, by name (default all four, in that order); MACHINE_PROFILE=0 skips
# megac_profile (90 s; the predictions then use the built-in H200 profile); OP_PROFILE=0 skips
# the --op-profile steps.
#
# MEGAC_RUN_FLAGS: extra flags for `megac run` (e.g. a synthetic-data or timing flag once it
# exists); by default the data are random uint16 tokens written here, which megac reads as a
# headerless token file.
set -uo pipefail

BUILD=${1:?usage: OUT=DIR bench/bench2.8b.sh BUILD_DIR}
OUT=${OUT:-/tmp/megac-bench-out}
WORK=${WORK:-/tmp/megac-bench}
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=python3
MEGAC_RUN_FLAGS=${MEGAC_RUN_FLAGS:-}
STEPS=${STEPS:-6}
GPU_MEM_FLAG=${GPU_MEM:+--gpu-mem $GPU_MEM}
MODEL=.bench/bench2.8b.onnx
PEER=bench/peer_pytorch.py
# cuDNN 9 (megac's bf16 attention) comes with torch on the GPU machine.
CUDNN_LIB=${CUDNN_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$CUDNN_LIB:${LD_LIBRARY_PATH:-}
# NVLink multicast stays off on these shared hosts (the device notes); FSDP goes through NCCL.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
mkdir -p "$OUT" "$WORK"
for f in "$BUILD/megac" "$MODEL" "$PEER"; do
  [ -e "$f" ] || { echo "bench2.8b.sh: $f is missing (carry it: see the header of $0)" >&2; exit 2; }
done

stage() { echo; echo "== $1 ($(date +%T))"; }

stage "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader || true
echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
"$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' || true
"$BUILD/megac" --version 2>/dev/null | head -3 || true

stage "megac compile (batch 8 x seq 2048, default compute)"
t0=$SECONDS
# shellcheck disable=SC2086
timeout 150 "$BUILD/megac" compile "$MODEL" --batch 8 --seq 2048 $GPU_MEM_FLAG -o "$WORK/b.plan" 2>&1 | tail -5
compile_rc=${PIPESTATUS[0]}
echo "compile: rc $compile_rc, $((SECONDS - t0)) s"

stage "machine profile (megac_profile) and the cost model's prediction for this plan"
if [ -x "$BUILD/megac_profile" ] && [ "${MACHINE_PROFILE:-1}" = 1 ]; then
  timeout 90 "$BUILD/megac_profile" "$OUT/machine.profile" >/dev/null 2>&1 && cat "$OUT/machine.profile"
fi
prof_flag=""
[ -s "$OUT/machine.profile" ] && prof_flag="--profile $OUT/machine.profile"
# shellcheck disable=SC2086
[ "$compile_rc" = 0 ] && timeout 60 "$BUILD/megac" plan "$WORK/b.plan" $prof_flag 2>&1 | grep -i -A6 "predict"
# The model's GPU time by op type, to set beside the measured one (--op-profile below).
# shellcheck disable=SC2086
[ "$compile_rc" = 0 ] && timeout 60 "$BUILD/megac" plan "$WORK/b.plan" $prof_flag --ops 2>&1 | head -24

stage "megac run ($STEPS steps, --init, --device cuda)"
run_rc=1
if [ "$compile_rc" = 0 ]; then
  data_flags="--data $WORK/tokens.u16"
  case " $MEGAC_RUN_FLAGS " in *" --data "*|*" --text "*|*" --input "*|*synthetic*) data_flags="";; esac
  if [ -n "$data_flags" ]; then  # 2^22 random tokens of the 32000-token vocabulary, uint16
    "$PY" -c "import numpy as np; np.random.default_rng(0).integers(0, 32000, 1 << 22, dtype=np.uint16).tofile('$WORK/tokens.u16')"
  fi
  rm -f "$OUT/megac_steps.jsonl"
  # shellcheck disable=SC2086
  timeout 200 "$BUILD/megac" run "$WORK/b.plan" --device cuda --init --steps "$STEPS" --seed 0 $data_flags \
    --log "$OUT/megac_steps.jsonl" $MEGAC_RUN_FLAGS 2>&1 | tail -n $((STEPS + 8))
  run_rc=${PIPESTATUS[0]}
  echo "run: rc $run_rc"
fi

if [ "$run_rc" = 0 ] && [ "${OP_PROFILE:-1}" = 1 ]; then
  stage "megac GPU time by op (2 more steps with --op-profile; events around every op, so not the timed run)"
  # shellcheck disable=SC2086
  timeout 100 "$BUILD/megac" run "$WORK/b.plan" --device cuda --init --steps 2 --seed 0 $data_flags $MEGAC_RUN_FLAGS \
    --op-profile 2>&1 | sed -n '/GPU time by op/,$p' | head -24
fi

# A row of its own plan: stream_row NAME STEPS "COMPILE FLAGS" ["RUN FLAGS"]. Prints the cost
# model's prediction for the plan (beside the measured lanes in the table) and logs the steps to
# $OUT/megac_NAME_steps.jsonl, its last step's measured lanes to $OUT/timeline_NAME.html.
stream_row() {
  local name=$1 steps=$2 cflags=$3 rflags=${4:-}
  stage "megac row '$name': compile $cflags, $steps steps $rflags"
  # shellcheck disable=SC2086
  timeout 150 "$BUILD/megac" compile "$MODEL" --batch 8 --seq 2048 $GPU_MEM_FLAG $cflags -o "$WORK/$name.plan" 2>&1 | tail -2
  # shellcheck disable=SC2086
  timeout 60 "$BUILD/megac" plan "$WORK/$name.plan" $prof_flag 2>&1 |
    grep -E "AdamW on the GPU|resident units:|moment slots|step time|busy:|critical path|bottleneck|host to device|device to host" |
    tee "$OUT/predict_$name.txt"
  rm -f "$OUT/megac_${name}_steps.jsonl"
  # shellcheck disable=SC2086
  timeout 200 "$BUILD/megac" run "$WORK/$name.plan" --device cuda --init --steps "$steps" --seed 0 $data_flags \
    --log "$OUT/megac_${name}_steps.jsonl" --timeline "$OUT/timeline_$name.html" $rflags $MEGAC_RUN_FLAGS 2>&1 | tail -n 4
  grep -o 'id="label"><b>[^<]*' "$OUT/timeline_$name.html" 2>/dev/null | sed 's/.*<b>/timeline: /'
}

# Rows beside the default plan (STREAMED=1): every unit streamed, its AdamW on the host
# (--gpu-adamw-units 0, the schedule before issue 23) and as the GPU-AdamW policy chooses;
# then with 8 micro-batches a step (compiled with --grad-accum 8).
if [ "$run_rc" = 0 ] && [ "${STREAMED:-1}" = 1 ]; then
  for row in ${ROWS:-stream_cpu_adamw stream stream_accum stream_accum_passes}; do
    case $row in
      stream_cpu_adamw) stream_row stream_cpu_adamw "$STEPS" "--resident-units 0 --gpu-adamw-units 0" ;;
      stream) stream_row stream "$STEPS" "--resident-units 0" ;;
      # One pass of 8 (layer-major: each unit streams in once a step; auto picks the most that fit),
      # and 8 passes of 1 (each micro-batch streams every unit; the gradients summed on the host).
      stream_accum) stream_row stream_accum "${ACCUM_STEPS:-3}" "--resident-units 0 --grad-accum 8" ;;
      stream_accum_passes)
        stream_row stream_accum_passes "${ACCUM_STEPS:-3}" "--resident-units 0 --grad-accum 8 --micro-batches-per-pass 1" ;;
      *) echo "bench2.8b.sh: ROWS: no row '$row' (stream_cpu_adamw stream stream_accum stream_accum_passes)" >&2 ;;
    esac
  done
fi

# PEERS=0 skips the PyTorch peers (a quick megac-only run; the table then lists them as not run).
# PEER_MODES: which PyTorch peers (default both).
[ "${PEERS:-1}" = 1 ] && for mode in ${PEER_MODES:-gpu fsdp_fused}; do
  stage "PyTorch peer: $mode (5 steps, the first one not timed)"
  OUT="$OUT" timeout 110 "$PY" "$PEER" "$mode" 2>&1 | grep -v -i "warn" | tail -8
  echo "peer $mode: rc ${PIPESTATUS[0]}"
done
if [ "${PEERS:-1}" = 1 ] && [ "${DEEPSPEED:-1}" = 1 ] && [ -d .whl ]; then
  stage "DeepSpeed ZeRO-3 offload peer (DeepSpeedCPUAdam; its JIT build about a minute)"
  # shellcheck disable=SC1091
  ( . bench/deepspeed_env.sh && OUT="$OUT" timeout 400 "$PY" bench/peer_deepspeed.py 2>&1 | grep -v -i "warn" | tail -8 )
fi

stage "table"
# The peers this run asked for: one that left no result failed, the others were not run.
asked=""
[ "${PEERS:-1}" = 1 ] && asked="${PEER_MODES:-gpu fsdp_fused}"
[ "${PEERS:-1}" = 1 ] && [ "${DEEPSPEED:-1}" = 1 ] && [ -d .whl ] && asked="$asked deepspeed"
ASKED="$asked" "$PY" - "$OUT" <<'EOF'
import json, os, statistics as st, sys
out = sys.argv[1]
P, TOKENS = 2_814_016_512, 8 * 2048
rows = []

def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None

steps = []
try:
    steps = [json.loads(l) for l in open(os.path.join(out, "megac_steps.jsonl")) if l.strip()]
except OSError:
    pass
megac = None
if steps:
    timed = steps[1:] if len(steps) > 1 else steps  # the first step pays for warm-up
    if "step_s" in timed[0]:
        step_s = st.median(s["step_s"] for s in timed)
    else:  # no per-step time in the log: differences of elapsed_s
        el = [s["elapsed_s"] for s in steps]
        step_s = st.median(b - a for a, b in zip(el, el[1:])) if len(el) > 1 else el[0]
    busy = {k: st.median(s[k] for s in timed) for k in ("h2d_busy_s", "compute_busy_s", "d2h_busy_s", "cpu_busy_s")
            if k in timed[0]}
    megac = dict(step_s=step_s, busy=busy, losses=[s["loss"] for s in steps], steps=len(steps))
    rows.append(("megac, weights streamed from host (bf16 GEMMs)", step_s, None))
else:
    rows.append(("megac, weights streamed from host (bf16 GEMMs)", None, None))
def megac_row(name, label, tokens):
    try:
        st_ = [json.loads(l) for l in open(os.path.join(out, name)) if l.strip()]
    except OSError:
        return
    t = [s["step_s"] for s in st_[1:] if "step_s" in s]
    if t:
        b = {k[:-7]: st.median(s[k] for s in st_[1:]) for k in ("h2d_busy_s", "compute_busy_s", "d2h_busy_s", "cpu_busy_s")
             if k in st_[1]}
        rows.append((label, st.median(t), {"busy": b, "tokens": tokens}))


megac_row("megac_stream_cpu_adamw_steps.jsonl", "megac, all streamed, AdamW on the host", TOKENS)
megac_row("megac_stream_steps.jsonl", "megac, all streamed (--resident-units 0)", TOKENS)
megac_row("megac_stream_accum_steps.jsonl", "megac, all streamed, --grad-accum 8, one pass", 8 * TOKENS)
megac_row("megac_stream_accum_passes_steps.jsonl", "megac, all streamed, --grad-accum 8, 8 passes", 8 * TOKENS)
for mode, label, then in (("gpu", "PyTorch, all on the GPU (bf16 autocast)", 0.924),
                          ("fsdp_fused", "PyTorch FSDP2 CPU offload, fused CPU AdamW", 1.946),
                          ("deepspeed", "DeepSpeed ZeRO-3 offload, DeepSpeedCPUAdam", 2.579)):
    r = load(os.path.join(out, f"baseline_{mode}.json"))
    rows.append((label, r["step_s"] if r else None, r or {"not_run": mode not in os.environ.get("ASKED", "").split()}))
    if r:
        r["measured_before"] = then

print(f"{'':<48} {'s/step':>8} {'tok/s':>8} {'TFLOPS 6PT':>10} {'GPU peak GiB':>12}")
for label, s, r in rows:
    if s is None:
        print(f"{label:<48} {'not run' if r and r.get('not_run') else 'failed':>8}")
        continue
    peak = f"{r['gpu_peak_GiB']:12.1f}" if r and "gpu_peak_GiB" in r else f"{'':>12}"
    tok = r.get("tokens", TOKENS) if r else TOKENS
    print(f"{label:<48} {s:8.3f} {tok / s:8.0f} {6 * P * tok / s / 1e12:10.1f} {peak}")
    if r and r.get("busy"):
        print(f"{'':<48} busy: " + ", ".join(f"{k} {v:.3f}" for k, v in r["busy"].items()))
print("(on this machine before: PyTorch all on the GPU 0.924 s/step, FSDP2 offload 1.946 (2026-12-02); "
      "DeepSpeed ZeRO-3 offload 2.579 (2026-12-04))")
if megac and megac["busy"]:
    b = megac["busy"]
    print("megac stream busy per step (s, median): " + ", ".join(f"{k[:-7]} {v:.3f}" for k, v in b.items())
          + f"  (step {megac['step_s']:.3f})")
if megac:
    print("megac losses: " + " ".join(f"{x:.4f}" for x in megac["losses"]))
json.dump({"params": P, "batch": 8, "seq": 2048, "megac": megac,
           "peers": {label: r for label, _, r in rows if r}}, open(os.path.join(out, "bench2.8b.json"), "w"), indent=1)
EOF
[ "$run_rc" = 0 ]
