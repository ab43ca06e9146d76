#!/usr/bin/env bash
# Fine-tuning a Hugging Face checkpoint with megac (`megac run PLAN --weights DIR`), beside PyTorch
# on the same weights and the same batch, in one run:
#   a. transformers builds a Llama-shaped model of 1.1B parameters (TinyLlama's shape: vocab 32000,
#      hidden 2048, intermediate 5632, 22 layers, 32 heads, 4 kv heads, untied head) from a config
#      with a fixed seed -- it stands in for a download -- and saves it with
#      save_pretrained(DIR, max_shard_size="2GB") in BF16 (2 shards + index.json); the fixed batch
#      (BATCH x SEQ ids drawn with the seed, targets = what the checkpoint predicts, its bf16 argmax:
#      a correct load then gives a loss far below ln(vocab), wrong weights about ln(vocab) or more);
#   b. tools/export_shapes_only.py exports that config without weights (names `m.<hf name>`);
#   c. megac compile --compute fp32, megac run --weights DIR 5 steps on the fixed batch, beside
#      PyTorch fine-tuning the same DIR (from_pretrained, fp32 masters on the GPU, fp32 compute with
#      TF32 off, torch.optim.AdamW, the same lr/betas/eps/weight decay, no clipping, constant lr):
#      per-step losses side by side; PASS when max |difference| <= 5e-4;
#   d. the same with megac's default bf16 compute and PyTorch under bf16 autocast (printed, no bound);
#   e. the Llama-3.1-8B shape (vocab 128256, hidden 4096, inter 14336, 32 layers, 32 heads, 8 kv,
#      Llama-3.1 rope as export_shapes_only.py's llama8b preset), built on the GPU in bf16 with a
#      fixed seed and saved the same way (16 GB); PyTorch's bf16 forward loss of it on the batch (a
#      separate process, before megac runs: megac's host store is 12 bytes/param, ~96 GB of the
#      machine's 125 GiB); megac run --weights DIR: load GB/s (megac's `weights:` line), peak host
#      RSS (/usr/bin/time -v), first-step loss vs PyTorch's within 1e-2 (PASS/FAIL); then the same
#      plan with --init: median step time of steps 2-4 within 10% of --weights' (PASS/FAIL). The 8B
#      checkpoint is deleted at the end (and on any exit).
#
# Run ON THE GPU MACHINE from the repo root:   OUT=/some/dir bench/finetune_pretrained.sh BUILD_DIR
# It needs, carried into the repo: BUILD_DIR (megac built with CUDA, e.g. .gpu from
# tools/gpu-build.sh). torch + transformers + onnx: the GPU machine's /opt/torch venv (PY=...).
# Results in $OUT (JSON lines of every side, megac's logs and jsonl, finetune_pretrained.json) and
# the table on stdout; checkpoints, ONNX files and plans stay in $WORK (default /tmp/megac-finetune).
# Every stage has a time limit and the whole run keeps within TOTAL_S (default 560 s; the 8B stage
# is skipped, and says so, when less than BIG_MIN=270 s is left for it). Estimated (not yet
# measured on the H200) at about 6 minutes: stages a-d ~2, e ~4 (8B build + save ~1, PyTorch
# forward ~0.7, two megac runs ~1 each). The exports and compiles run in the background from the
# start (CPU only), while the checkpoints build and the 1B stages run.
# Exit status 0 when every check passes. Device time: use the run tool's full 600 s.
#
# Knobs: SKIP_8B=1 (stages a-d only); COLD=1 (evict the 8B checkpoint from the page cache before
# megac reads it, so its GB/s is the disk's; default: as left by the save, mostly cached);
# LR BETAS EPS WD STEPS (both sides); shapes: VOCAB HIDDEN INTER LAYERS HEADS KV_HEADS BATCH SEQ for
# stages a-d, BIG_VOCAB BIG_HIDDEN BIG_INTER BIG_LAYERS BIG_HEADS BIG_KV_HEADS BIG_BATCH BIG_SEQ for e.
# Smoke test on a CPU-only machine (tiny shapes, both sides on the CPU; megac's CPU backend computes
# fp32, and rounds as bf16 with --emulate-compute in the bf16 stages; stage e then runs a tiny
# Llama-3.1-roped shape, its step-time check printed but not counted):
#   SMOKE=1 DEVICE=cpu PY=/tmp/tv/bin/python bench/finetune_pretrained.sh build      (~40 s on 2 cores)
#   SMOKE=1 SKIP_8B=1 DEVICE=cpu PY=/tmp/tv/bin/python bench/finetune_pretrained.sh build
set -uo pipefail

BUILD=${1:?usage: OUT=DIR bench/finetune_pretrained.sh BUILD_DIR}
OUT=${OUT:-/tmp/megac-finetune-out}
WORK=${WORK:-/tmp/megac-finetune}
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=python3
DEVICE=${DEVICE:-cuda}
SMOKE=${SMOKE:-0}
SKIP_8B=${SKIP_8B:-0}
COLD=${COLD:-0}
TOTAL_S=${TOTAL_S:-560}
MEGAC=$BUILD/megac
PEER=bench/finetune_peer.py
EXPORT=tools/export_shapes_only.py
CUDNN_LIB=${CUDNN_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$CUDNN_LIB:${LD_LIBRARY_PATH:-}
export HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false

# The optimizer, identical on both sides (constant lr, no warmup, no clipping, every tensor decayed).
LR=${LR:-1e-4} BETAS=${BETAS:-0.9,0.95} EPS=${EPS:-1e-8} WD=${WD:-0.1} STEPS=${STEPS:-5}
BIG_STEPS=${BIG_STEPS:-4}
OPT_FLAGS=(--lr "$LR" --betas "$BETAS" --eps "$EPS" --weight-decay "$WD" --warmup 0 --schedule constant --clip 0)

# Shapes: vocab hidden inter layers heads kv_heads batch seq
if [ "$SMOKE" = 1 ]; then
  small="256 64 128 2 4 2 2 16"; big="512 128 256 2 4 2 2 32"
else
  small="32000 2048 5632 22 32 4 4 512"; big="128256 4096 14336 32 32 8 8 2048"
fi
read -r v h i l a k b s <<<"$small"
VOCAB=${VOCAB:-$v} HIDDEN=${HIDDEN:-$h} INTER=${INTER:-$i} LAYERS=${LAYERS:-$l} HEADS=${HEADS:-$a}
KV_HEADS=${KV_HEADS:-$k} BATCH=${BATCH:-$b} SEQ=${SEQ:-$s}
read -r v h i l a k b s <<<"$big"
BIG_VOCAB=${BIG_VOCAB:-$v} BIG_HIDDEN=${BIG_HIDDEN:-$h} BIG_INTER=${BIG_INTER:-$i} BIG_LAYERS=${BIG_LAYERS:-$l}
BIG_HEADS=${BIG_HEADS:-$a} BIG_KV_HEADS=${BIG_KV_HEADS:-$k} BIG_BATCH=${BIG_BATCH:-$b} BIG_SEQ=${BIG_SEQ:-$s}
SMALL_SHAPE=(--vocab "$VOCAB" --hidden "$HIDDEN" --inter "$INTER" --layers "$LAYERS" --heads "$HEADS"
             --kv-heads "$KV_HEADS" --rope default --rope-theta 10000 --max-pos 4096 --batch "$BATCH" --seq "$SEQ")
BIG_SHAPE=(--vocab "$BIG_VOCAB" --hidden "$BIG_HIDDEN" --inter "$BIG_INTER" --layers "$BIG_LAYERS" --heads "$BIG_HEADS"
           --kv-heads "$BIG_KV_HEADS" --rope llama3 --max-pos 131072 --batch "$BIG_BATCH" --seq "$BIG_SEQ")
# The shard size: 2GB as a user's save; smaller for the tiny smoke shapes so that they shard too.
SHARD=${SHARD:-2GB}
[ "$SMOKE" = 1 ] && SHARD=${SMOKE_SHARD:-100KB}

# megac's device flags; on the CPU the bf16 plans round their products as the GPU would.
DEV_FLAGS=(--device "$DEVICE")
EMU=()
[ "$DEVICE" = cpu ] && EMU=(--emulate-compute)

SMALL_DIR=$WORK/small_ckpt SMALL_BATCH=$WORK/small_batch SMALL_CFG=$WORK/small_cfg
BIG_DIR=$WORK/big_ckpt BIG_BATCH_DIR=$WORK/big_batch BIG_CFG=$WORK/big_cfg
mkdir -p "$OUT" "$WORK"
# This script's own files only (OUT may be a folder others write to).
rm -rf "$SMALL_DIR" "$BIG_DIR" "$SMALL_BATCH" "$BIG_BATCH_DIR" "$SMALL_CFG" "$BIG_CFG" "$WORK"/small.* "$WORK"/big.*
rm -f "$OUT"/stages.jsonl "$OUT"/peer_small.jsonl "$OUT"/peer_big.jsonl "$OUT"/megac_* "$OUT"/config_match_*.json \
  "$OUT"/big_cache.json "$OUT"/export_compile_*.log "$OUT"/finetune_pretrained.json
for f in "$MEGAC" "$PEER" "$EXPORT"; do
  [ -e "$f" ] || { echo "finetune_pretrained.sh: $f is missing (carry it: see the header of $0)" >&2; exit 2; }
done
# 16 GB of 8B checkpoint must not outlive the run, whatever ends it.
# shellcheck disable=SC2317  # called by the trap
cleanup() { rm -rf "$BIG_DIR"; [ "${KEEP_CKPT:-0}" = 1 ] || rm -rf "$SMALL_DIR"; }
trap cleanup EXIT

T_ALL=$SECONDS
left() { echo $((TOTAL_S - (SECONDS - T_ALL))); }
# lim WANT [KEEP]: a stage's time limit: WANT seconds, or what is left of TOTAL_S less KEEP.
lim() {
  local l=$(($(left) - ${2:-0}))
  ((l > $1)) && l=$1
  ((l < 5)) && l=5
  echo "$l"
}
# stage ID TITLE: a stage begins (ID names it in stages.jsonl and in the table's wall times).
stage() { STAGE=$1; STAGE_T0=$SECONDS; echo; echo "== $2 ($(date +%T), $((SECONDS - T_ALL)) s in)"; }
# done_stage RC: the stage's wall time, printed and recorded.
done_stage() {
  echo "-- $STAGE: rc $1, $((SECONDS - STAGE_T0)) s"
  printf '{"stage": "%s", "rc": %d, "wall_s": %d}\n' "$STAGE" "$1" "$((SECONDS - STAGE_T0))" >>"$OUT/stages.jsonl"
}

# export_compile NAME CFG_DIR BATCH SEQ COMPUTE...: config.json (the same arguments as the
# checkpoint's) -> shapes-only ONNX -> one plan per compute mode. Run in the background.
export_compile() {
  local name=$1 cfg=$2 batch=$3 seq=$4 t0=$SECONDS rc
  shift 4
  local shape=("${SMALL_SHAPE[@]}")
  [ "$name" = big ] && shape=("${BIG_SHAPE[@]}")
  {
    timeout 120 "$PY" "$PEER" make-checkpoint --config-only --dir "$cfg" "${shape[@]}" &&
      timeout 300 "$PY" "$EXPORT" "$cfg" "$WORK/$name.onnx"
    rc=$?
    echo "export $name: rc $rc, $((SECONDS - t0)) s"
    [ "$rc" = 0 ] || exit "$rc"
    for c in "$@"; do
      local t1=$SECONDS
      timeout 200 "$MEGAC" compile "$WORK/$name.onnx" --batch "$batch" --seq "$seq" --compute "$c" "${OPT_FLAGS[@]}" \
        -o "$WORK/$name.$c.plan"
      rc=$?
      echo "compile $name --compute $c (batch $batch x seq $seq): rc $rc, $((SECONDS - t1)) s"
      [ "$rc" = 0 ] || exit "$rc"
    done
  } >"$OUT/export_compile_$name.log" 2>&1
}

# wait_bg NAME PID LIMIT: waits (LIMIT seconds at most) for a background export+compile and shows its summary lines.
wait_bg() {
  stage "b.$1" "b. wait: shapes-only export + compile ($1, in the background since $((BG_T0 - T_ALL)) s)"
  local rc t_end=$((SECONDS + $3))
  while kill -0 "$2" 2>/dev/null && ((SECONDS < t_end)); do sleep 1; done
  if kill -0 "$2" 2>/dev/null; then
    echo "not done after $3 s: stopping it"
    pkill -TERM -P "$2" 2>/dev/null; kill "$2" 2>/dev/null  # the background job and its children, by id
  fi
  wait "$2"
  rc=$?
  grep -E "^export |^compile |^plan:|\.onnx: |error" "$OUT/export_compile_$1.log" | cut -c1-400
  done_stage "$rc"
  return "$rc"
}

# cmp_cfg NAME CFG_DIR CKPT_DIR: the exported config against the checkpoint's (the fields that shape the graph).
cmp_cfg() {
  timeout 60 "$PY" - "$2/config.json" "$3/config.json" >"$OUT/config_match_$1.json" 2>/dev/null <<'PYEOF'
import json, sys
keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "rope_parameters", "tie_word_embeddings", "max_position_embeddings",
        "rms_norm_eps", "attention_bias", "mlp_bias", "hidden_act")
a, b = (json.load(open(f)) for f in sys.argv[1:3])
diff = [k for k in keys if a.get(k) != b.get(k)]
print(json.dumps({"match": not diff, "differ": diff}))
PYEOF
  echo "  exported config == checkpoint config: $(cat "$OUT/config_match_$1.json" 2>/dev/null || echo '(not compared)')"
}

# The max-RSS wrapper: GNU time, else Python's getrusage of the children (same field name).
if [ -x /usr/bin/time ]; then
  rss() { local f=$1; shift; /usr/bin/time -v -o "$f" "$@"; }
else
  rss() {
    local f=$1; shift
    "$PY" -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write("\tMaximum resident set size (kbytes): %d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)' "$f" "$@"
  }
fi

# run_megac NAME LIMIT PLAN BATCH_DIR [flags...]: megac run on the fixed batch; $OUT/megac_NAME.{log,jsonl,time}.
run_megac() {
  local name=$1 limit=$2 plan=$3 bdir=$4 rc
  shift 4
  rm -f "$OUT/megac_$name.jsonl"
  rss "$OUT/megac_$name.time" timeout "$limit" "$MEGAC" run "$plan" "${DEV_FLAGS[@]}" --input "$bdir/ids.pb" \
    --targets "$bdir/tgt.pb" "${OPT_FLAGS[@]}" --log "$OUT/megac_$name.jsonl" "$@" >"$OUT/megac_$name.log" 2>&1
  rc=$?
  grep -E "^weights|^step |^done|rror|^megac" "$OUT/megac_$name.log" | cut -c1-220 | tail -n 14
  grep -h "Maximum resident" "$OUT/megac_$name.time" 2>/dev/null | sed 's/^\s*/host /'
  return "$rc"
}

# peer MODE JSONL LIMIT [args...]: bench/finetune_peer.py, its JSON lines appended to JSONL.
peer() {
  local mode=$1 jsonl=$2 limit=$3
  shift 3
  timeout "$limit" "$PY" "$PEER" "$mode" --device "$DEVICE" --out "$jsonl" "$@" 2>&1 |
    grep -v -i -E 'warn|^\s*$|"step": ' | cut -c1-300 | tail -n 12
  return "${PIPESTATUS[0]}"
}

stage machine "machine"
if [ "$DEVICE" = cuda ]; then
  timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); " \
  "memory $(free -g | awk '/Mem:/ {print $2 " GiB, " $7 " available"}'); disk free in $WORK: $(df -h "$WORK" | awk 'NR==2 {print $4}')"
timeout 60 "$PY" -c 'import torch, transformers, onnx; print("torch", torch.__version__, "transformers", transformers.__version__, "onnx", onnx.__version__)'
timeout 30 "$MEGAC" --version 2>/dev/null | head -2 || true
echo "optimizer (both sides): lr $LR, betas $BETAS, eps $EPS, weight decay $WD, constant, no clipping"
echo "shapes: small V$VOCAB H$HIDDEN I$INTER L$LAYERS A$HEADS/$KV_HEADS at $BATCH x $SEQ; big V$BIG_VOCAB H$BIG_HIDDEN" \
  "I$BIG_INTER L$BIG_LAYERS A$BIG_HEADS/$BIG_KV_HEADS at $BIG_BATCH x $BIG_SEQ$([ "$SKIP_8B" = 1 ] && echo ' (skipped)')"

# b (in the background, from t=0): the shapes-only exports and the plans, CPU-only work.
BG_T0=$SECONDS
export_compile small "$SMALL_CFG" "$BATCH" "$SEQ" fp32 bf16 &
SMALL_BG=$!
BIG_BG=
if [ "$SKIP_8B" != 1 ]; then
  export_compile big "$BIG_CFG" "$BIG_BATCH" "$BIG_SEQ" bf16 &
  BIG_BG=$!
fi

stage a "a. the 1B checkpoint: transformers from a config, seed 0, save_pretrained(max_shard_size=$SHARD) in BF16"
peer make-checkpoint "$OUT/peer_small.jsonl" "$(lim 180)" --dir "$SMALL_DIR" --batch-dir "$SMALL_BATCH" \
  "${SMALL_SHAPE[@]}" --max-shard-size "$SHARD"
rc=$?; done_stage $rc
[ "$rc" = 0 ] && du -b "$SMALL_DIR"/*.safetensors "$SMALL_DIR"/*.json | sed "s|$SMALL_DIR/||; s/^/  /"

wait_bg small "$SMALL_BG" "$(lim 300 120)"
small_ok=$?
[ "$rc" = 0 ] || small_ok=1
[ "$small_ok" = 0 ] && cmp_cfg small "$SMALL_CFG" "$SMALL_DIR"

if [ "$small_ok" = 0 ]; then
  stage c.megac "c. megac run --weights, --compute fp32 ($STEPS steps, fixed batch)"
  run_megac fp32 "$(lim 150)" "$WORK/small.fp32.plan" "$SMALL_BATCH" --weights "$SMALL_DIR" --steps "$STEPS"
  done_stage $?
  stage c.pytorch "c. PyTorch fine-tune of the same checkpoint, fp32 (TF32 off)"
  peer finetune "$OUT/peer_small.jsonl" "$(lim 150)" --dir "$SMALL_DIR" --batch-dir "$SMALL_BATCH" --compute fp32 \
    --steps "$STEPS" --lr "$LR" --betas "$BETAS" --eps "$EPS" --weight-decay "$WD"
  done_stage $?
  stage d.megac "d. megac run --weights, default bf16 compute ($STEPS steps)"
  run_megac bf16 "$(lim 150)" "$WORK/small.bf16.plan" "$SMALL_BATCH" --weights "$SMALL_DIR" --steps "$STEPS" "${EMU[@]}"
  done_stage $?
  stage d.pytorch "d. PyTorch fine-tune, bf16 autocast"
  peer finetune "$OUT/peer_small.jsonl" "$(lim 150)" --dir "$SMALL_DIR" --batch-dir "$SMALL_BATCH" --compute bf16 \
    --steps "$STEPS" --lr "$LR" --betas "$BETAS" --eps "$EPS" --weight-decay "$WD"
  done_stage $?
fi
[ "${KEEP_CKPT:-0}" = 1 ] || rm -rf "$SMALL_DIR"

BIG_MIN=${BIG_MIN:-270}
if [ "$SKIP_8B" != 1 ] && [ "$(left)" -lt "$BIG_MIN" ]; then
  echo; echo "== e. skipped: $(left) s left of TOTAL_S=$TOTAL_S, the 8B stage needs about $BIG_MIN"
  pkill -TERM -P "$BIG_BG" 2>/dev/null; kill "$BIG_BG" 2>/dev/null  # the background export/compile, by its id
  echo '{"stage": "e", "skipped": "no time left"}' >>"$OUT/stages.jsonl"
elif [ "$SKIP_8B" != 1 ]; then
  KEEP=20  # seconds kept for the cleanup and the table
  stage e.checkpoint "e. the 8B checkpoint: built on the $DEVICE in bf16, seed 0, save_pretrained(max_shard_size=$SHARD)"
  peer make-checkpoint "$OUT/peer_big.jsonl" "$(lim 240 $KEEP)" --dir "$BIG_DIR" --batch-dir "$BIG_BATCH_DIR" \
    "${BIG_SHAPE[@]}" --max-shard-size "$SHARD"
  big_rc=$?; done_stage $big_rc
  [ "$big_rc" = 0 ] && echo "  $(find "$BIG_DIR" -name '*.safetensors' | wc -l) shards, $(du -sh "$BIG_DIR" | cut -f1)"
  if [ "$big_rc" = 0 ]; then
    stage e.pytorch "e. PyTorch bf16 forward loss of the saved checkpoint (its own process, before megac)"
    peer forward-loss "$OUT/peer_big.jsonl" "$(lim 180 $KEEP)" --dir "$BIG_DIR" --batch-dir "$BIG_BATCH_DIR"
    done_stage $?
  fi
  wait_bg big "$BIG_BG" "$(lim 300 $((KEEP + 120)))" || big_rc=1
  [ "$big_rc" = 0 ] && cmp_cfg big "$BIG_CFG" "$BIG_DIR"
  if [ "$big_rc" = 0 ]; then
    if [ "$COLD" = 1 ]; then  # write back and drop the checkpoint's pages: megac then reads the disk
      timeout 120 "$PY" -c 'import os, sys
for d in sys.argv[1:]:
    for f in os.listdir(d):
        fd = os.open(os.path.join(d, f), os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$BIG_DIR"
    fi
    echo "{\"cold_cache\": $([ "$COLD" = 1 ] && echo true || echo false)}" >"$OUT/big_cache.json"
    stage e.weights "e. megac run --weights (the 8B checkpoint into the host store), $BIG_STEPS steps, bf16 compute"
    run_megac big_weights "$(lim 300 $((KEEP + 60)))" "$WORK/big.bf16.plan" "$BIG_BATCH_DIR" --weights "$BIG_DIR" \
      --steps "$BIG_STEPS" "${EMU[@]}"
    done_stage $?
    rm -rf "$BIG_DIR"
    stage e.init "e. the same plan with --init, $BIG_STEPS steps"
    run_megac big_init "$(lim 240 $KEEP)" "$WORK/big.bf16.plan" "$BIG_BATCH_DIR" --init --seed 0 \
      --steps "$BIG_STEPS" "${EMU[@]}"
    done_stage $?
  fi
  rm -rf "$BIG_DIR"
fi

stage table "table"
timeout 60 "$PY" - "$OUT" "$SKIP_8B" "$DEVICE" "$((SECONDS - T_ALL))" <<'EOF'
import json, math, os, re, statistics as st, sys

out, skip_big, device = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
res = {"checks": {}}


def jl(name):
    try:
        return [json.loads(l) for l in open(os.path.join(out, name)) if l.strip()]
    except (OSError, ValueError):
        return []


def text(name):
    try:
        return open(os.path.join(out, name)).read()
    except OSError:
        return ""


def megac(name):
    steps = [s for s in jl(f"megac_{name}.jsonl") if "loss" in s]
    log = text(f"megac_{name}.log")
    r = {"losses": [s["loss"] for s in steps]}
    if steps and "step_s" in steps[0]:
        r["step_s"] = [s["step_s"] for s in steps]
    elif steps:  # no per-step time (the CPU backend): differences of elapsed_s
        el = [0.0] + [s["elapsed_s"] for s in steps]
        r["step_s"] = [b - a for a, b in zip(el, el[1:])]
    wl = [l.strip() for l in log.splitlines() if l.startswith("weights")]
    if wl:
        r["weights_lines"] = wl
        w = "\n".join(wl)
        g = re.search(r"([0-9.]+) ([KMGT]?)B/s", w)  # GB/s as a rule; other units converted
        r["load_GBps"] = float(g.group(1)) * {"": 1e-9, "K": 1e-6, "M": 1e-3, "G": 1, "T": 1e3}[g.group(2)] if g else None
        n = re.search(r"loaded (\d+) of (\d+)", w)
        if n:
            r["loaded"], r["of"] = int(n.group(1)), int(n.group(2))
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text(f"megac_{name}.time"))
    if m:
        r["peak_rss_GiB"] = round(int(m.group(1)) / 2**20, 2)
    errs = [l for l in log.splitlines() if "error" in l.lower()]
    if errs:
        r["error"] = errs[0][:300]
    return r


def peer(jsonl, mode, **match):
    for r in jl(jsonl):
        if r.get("mode") == mode and all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def same_config(name):
    try:
        return json.load(open(os.path.join(out, f"config_match_{name}.json")))["match"]
    except (OSError, ValueError, KeyError):
        return None


def fmt(x, f="{:.4f}"):
    return "-" if x is None else f.format(x)


ok = True
ck = peer("peer_small.jsonl", "make-checkpoint")
res["small_checkpoint"] = ck
def count(n):
    return f"{n / 1e9:.3f} B" if n >= 1e8 else f"{n / 1e6:.3f} M"


print("1B-class checkpoint: " + (f"{count(ck['params'])} parameters, {ck['bytes'] / 1e9:.2f} GB in "
      f"{sum(f.endswith('.safetensors') for f in ck['files'])} files (BF16), batch {ck['batch']} x {ck['seq']}, "
      f"targets: {ck['targets']}; built {ck['build_s']} s, saved {ck['save_s']} s" if ck else "failed"))
for compute, bound in (("fp32", 5e-4), ("bf16", None)):
    m, p = megac(compute), peer("peer_small.jsonl", "finetune", compute=compute, summary=True)
    pl = p["losses"] if p else []
    ml = m["losses"]
    n = max(len(ml), len(pl))
    print(f"\n{compute}: per-step loss, megac --weights (--compute {compute}) vs PyTorch "
          f"({'fp32, TF32 off' if compute == 'fp32' else 'bf16 autocast, fp32 masters'})")
    for w in m.get("weights_lines", []):
        print("  megac: " + w)
    if m.get("error"):
        print("  megac: " + m["error"])
    print(f"  {'step':>4} {'megac':>12} {'PyTorch':>12} {'|diff|':>10}")
    diffs = []
    for i in range(n):
        a = ml[i] if i < len(ml) else None
        b = pl[i] if i < len(pl) else None
        d = abs(a - b) if a is not None and b is not None else None
        if d is not None:
            diffs.append(d)
        print(f"  {i + 1:>4} {fmt(a, '{:.6f}'):>12} {fmt(b, '{:.6f}'):>12} {fmt(d, '{:.2e}'):>10}")
    complete = n > 0 and len(ml) == len(pl) == n
    mx = max(diffs) if diffs and complete else None
    r = {"megac": m, "pytorch": p, "max_abs_diff": mx}
    if bound is not None:
        passed = mx is not None and mx <= bound and all(math.isfinite(x) for x in ml)
        ok &= passed
        r["bound"], r["pass"] = bound, passed
        print(f"  max |diff| {fmt(mx, '{:.2e}')} (bound {bound:g}): {'PASS' if passed else 'FAIL'}")
    else:
        print(f"  max |diff| {fmt(mx, '{:.2e}')} (no bound: bf16 products on both sides, rounded differently)")
    res["checks"][compute] = r
res["small_export_config_matches"] = same_config("small")

if not skip_big:
    big = {}
    ckb = peer("peer_big.jsonl", "make-checkpoint")
    fw = peer("peer_big.jsonl", "forward-loss")
    mw, mi = megac("big_weights"), megac("big_init")
    big.update(checkpoint=ckb, pytorch_forward=fw, megac_weights=mw, megac_init=mi)
    try:
        big["cold_cache"] = json.load(open(os.path.join(out, "big_cache.json")))["cold_cache"]
    except (OSError, ValueError, KeyError):
        big["cold_cache"] = None
    print("\n8B-class checkpoint: " + (f"{count(ckb['params'])} parameters, {ckb['bytes'] / 1e9:.2f} GB in "
          f"{sum(f.endswith('.safetensors') for f in ckb['files'])} files (BF16), built {ckb['build_s']} s "
          f"(argmax targets {ckb['batch_s']} s), saved {ckb['save_s']} s; batch {ckb['batch']} x {ckb['seq']}"
          if ckb else "skipped (not enough time left)" if any(s.get("stage") == "e" and s.get("skipped")
                                                               for s in jl("stages.jsonl")) else "failed"))
    for w in mw.get("weights_lines", []):
        print("  megac: " + w)
    if mw.get("weights_lines"):
        print("  (" + ("the page cache was dropped first: a read from the disk" if big["cold_cache"] else
                       "the checkpoint was just written and read: mostly from the page cache; COLD=1 drops it") + ")")
    for k, r in (("--weights", mw), ("--init", mi)):
        if r.get("error"):
            print(f"  megac {k}: {r['error']}")
    print(f"  load: {fmt(mw.get('load_GBps'), '{:.2f}')} GB/s; peak host RSS: --weights "
          f"{fmt(mw.get('peak_rss_GiB'), '{:.1f}')} GiB, --init {fmt(mi.get('peak_rss_GiB'), '{:.1f}')} GiB")
    loaded_all = mw.get("loaded") is not None and mw.get("loaded") == mw.get("of")
    l1 = mw["losses"][0] if mw["losses"] else None
    pf = fw["loss"] if fw else None
    d = abs(l1 - pf) if l1 is not None and pf is not None else None
    p1 = d is not None and d <= 1e-2 and loaded_all
    ok &= p1
    print(f"  first-step loss: megac --weights {fmt(l1, '{:.5f}')}, PyTorch bf16 forward {fmt(pf, '{:.5f}')}, "
          f"|diff| {fmt(d, '{:.2e}')} (bound 1e-2{'' if loaded_all else '; not every parameter loaded'}): "
          f"{'PASS' if p1 else 'FAIL'}   (--init's first loss, other weights: "
          f"{fmt(mi['losses'][0] if mi['losses'] else None, '{:.5f}')})")

    def med(r):
        t = r.get("step_s", [])[1:4]
        return st.median(t) if t else None

    tw, ti = med(mw), med(mi)
    rel = (tw - ti) / ti if tw and ti else None
    p2 = rel is not None and abs(rel) <= 0.10
    if device == "cuda":
        ok &= p2
    print(f"  step time, median of steps 2-{min(4, len(mw.get('step_s', []))) or 4}: --weights {fmt(tw, '{:.3f}')} s, "
          f"--init {fmt(ti, '{:.3f}')} s, {fmt(rel * 100 if rel is not None else None, '{:+.1f}')}% "
          f"(bound 10%): {'PASS' if p2 else 'FAIL'}"
          + ("" if device == "cuda" else "  (not counted on the CPU: milliseconds of a tiny model)"))
    print("  losses --weights: " + " ".join(f"{x:.4f}" for x in mw["losses"]) +
          ";  --init: " + " ".join(f"{x:.4f}" for x in mi["losses"]))
    big.update(first_loss_diff=d, first_loss_pass=p1, step_weights_s=tw, step_init_s=ti, step_rel=rel,
               step_pass=p2, export_config_matches=same_config("big"))
    res["big"] = big

stages = jl("stages.jsonl")
stages_total = sys.argv[4] + " s so far"
res["stages"] = stages
print("\nwall time by stage (s): " + ", ".join(f"{s['stage']} {s.get('wall_s', s.get('skipped', '-'))}"
                                             for s in stages) + f"; total {stages_total}")
res["pass"] = bool(ok)
print("overall: " + ("PASS" if ok else "FAIL"))
json.dump(res, open(os.path.join(out, "finetune_pretrained.json"), "w"), indent=1, default=str)
sys.exit(0 if ok else 1)
EOF
rc=$?
echo "total: $((SECONDS - T_ALL)) s"
exit $rc
