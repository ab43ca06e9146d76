#!/usr/bin/env bash
# The whole fine-tuning loop (issue 19, part 2), in one run: a Hugging Face checkpoint in, SFT data
# with a loss mask, megac training, a Hugging Face directory out, and PyTorch on both ends.
#   a. transformers builds a Llama-shaped model of 0.97B parameters from a config with a fixed seed
#      (it stands in for a download; bench/finetune_peer.py make-checkpoint, as in
#      bench/finetune_pretrained.sh): TinyLlama's shape (hidden 2048, intermediate 5632, 22 layers,
#      32 heads, 4 kv heads, untied head) with the vocabulary of the committed tokenizer,
#      test/data/tokenizer: 512 tokens (VOCAB=512, so model and tokenizer agree and the exported
#      directory is a usable pair; VOCAB=32000 gives TinyLlama's 1.1B, the data's tokens still
#      < 512). save_pretrained(DIR, max_shard_size=2GB) in BF16, with the tokenizer's files copied
#      in and its special-token ids in config.json / generation_config.json;
#   b. SFT data: a synthetic JSONL generated here (finetune_peer.py sft-jsonl: its own splitmix64
#      generator, the same bytes everywhere; 2000 rows: prompt/response (arithmetic, sentences, long
#      documents to summarize) and chat (system, user, assistant turns)), turned into sft.bin +
#      sft.mask by tools/prepare_data.py with the committed tokenizer, run HERE with $PY (the GPU
#      machine's /opt/torch venv has transformers and tokenizers; another tokenizers version may
#      tokenize differently, which changes no check: both sides read the same files; the sha256s are
#      printed beside those this CPU machine's tokenizers 0.23.3 / transformers 5.25 gave).
#      About 500k tokens, 25% counted; a third of the seq-512 windows count no target (long prompts),
#      so megac's redraw of such windows is exercised. SFT_DATA=PREFIX uses PREFIX.bin/.mask instead;
#   c. tools/export_shapes_only.py (in the background from t=0, with megac compile --compute fp32);
#      megac run --weights DIR --data sft.bin --mask sft.mask, STEPS=20 steps of BATCH x SEQ x
#      ACCUM micro-batches (4 x 512 x 2), --checkpoint-dir;
#   d. megac export CKPT --hf EXPORTED --hf-config DIR (fp32);
#   e. megac forward model.onnx --weights CKPT on a fixed input (FWD_BATCH x FWD_SEQ ids from the
#      token file; the CPU reference backend) against AutoModelForCausalLM.from_pretrained(EXPORTED)
#      in fp32 (TF32 off) on $DEVICE: PASS when the relative L2 of the logits <= 1e-5. The untrained
#      DIR's logits are printed beside them (how far 20 steps moved the model);
#   f. PyTorch fine-tunes DIR (from_pretrained, fp32 masters, fp32 compute, TF32 off,
#      torch.optim.AdamW with the same lr/betas/eps/weight decay, constant lr, no clipping) on the
#      same masked batches: megac's sampler reproduced in Python (runtime/train/Data.cpp: windows
#      from splitmix64 of (seed, index), windows with no counted target redrawn, masked targets
#      -100), loss = the mean over the step's counted targets across its micro-batches. PASS when
#      the first CMP_STEPS=5 losses are within 5e-4 of megac's; and a sampler check: the windows
#      redrawn each step (megac's skipped_windows) equal Python's, every step.
#
# Run ON THE GPU MACHINE from the repo root:   OUT=/some/dir bench/sft_loop.sh BUILD_DIR
# It needs, carried into the repo: BUILD_DIR (megac built with CUDA: tools/gpu-build.sh stages it in
# .gpu); torch + transformers + tokenizers + onnx: the GPU machine's /opt/torch venv (PY=...).
# Results in $OUT (megac's log and jsonl, the PyTorch side's JSON lines, stages.jsonl,
# sft_loop.json) and the table on stdout; checkpoints, data, ONNX and plan in $WORK (default
# /tmp/megac-sft; the checkpoints are deleted at the end unless KEEP_CKPT=1).
# Every stage has a time limit and the whole run keeps within TOTAL_S (default 540 s). Estimated
# (not yet measured on the H200) at about 4 minutes: checkpoint ~0.5, data ~0.1, megac run 20 steps
# + its 12 GB checkpoint ~1.5, export ~0.3, forward + logits ~1, PyTorch ~0.5.
# Exit status 0 when every check passes. Device time: give the run tool its full 600 s.
#
# Knobs: LR BETAS EPS WD STEPS SEED ACCUM (both sides); PT_STEPS (PyTorch's steps, default STEPS;
# CMP_STEPS of them checked); shapes VOCAB HIDDEN INTER LAYERS HEADS KV_HEADS BATCH SEQ;
# FWD_BATCH FWD_SEQ (the logits check's input); ROWS (the JSONL's rows); SFT_DATA (see b).
# Smoke test on a CPU-only machine (vocab 512, hidden 64, 2 layers, batch 2 x seq 32; both sides on
# the CPU, megac's CPU backend computing fp32):
#   SMOKE=1 DEVICE=cpu PY=/tmp/tv/bin/python bench/sft_loop.sh build      (~1 min on 2 cores)
set -uo pipefail

BUILD=${1:?usage: OUT=DIR bench/sft_loop.sh BUILD_DIR}
OUT=${OUT:-/tmp/megac-sft-out}
WORK=${WORK:-/tmp/megac-sft}
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=python3
DEVICE=${DEVICE:-cuda}
SMOKE=${SMOKE:-0}
TOTAL_S=${TOTAL_S:-540}
MEGAC=$BUILD/megac
PEER=bench/finetune_peer.py
EXPORT=tools/export_shapes_only.py
PREP=tools/prepare_data.py
TOK=test/data/tokenizer
CUDNN_LIB=${CUDNN_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$CUDNN_LIB:${LD_LIBRARY_PATH:-}
export HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1

# The optimizer and the sampler, identical on both sides (constant lr, no warmup, no clipping,
# every tensor decayed; the data's seed; ACCUM micro-batches a step).
LR=${LR:-1e-4} BETAS=${BETAS:-0.9,0.95} EPS=${EPS:-1e-8} WD=${WD:-0.1} STEPS=${STEPS:-20} SEED=${SEED:-0}
ACCUM=${ACCUM:-2} CMP_STEPS=${CMP_STEPS:-5} PT_STEPS=${PT_STEPS:-$STEPS}
OPT_FLAGS=(--lr "$LR" --betas "$BETAS" --eps "$EPS" --weight-decay "$WD" --warmup 0 --schedule constant --clip 0
           --seed "$SEED" --grad-accum "$ACCUM")

# Shapes: vocab hidden inter layers heads kv_heads batch seq fwd_batch fwd_seq
if [ "$SMOKE" = 1 ]; then
  shape="512 64 128 2 4 2 2 32 2 32"
else
  shape="512 2048 5632 22 32 4 4 512 2 64"
fi
read -r v h i l a k b s fb fs <<<"$shape"
VOCAB=${VOCAB:-$v} HIDDEN=${HIDDEN:-$h} INTER=${INTER:-$i} LAYERS=${LAYERS:-$l} HEADS=${HEADS:-$a}
KV_HEADS=${KV_HEADS:-$k} BATCH=${BATCH:-$b} SEQ=${SEQ:-$s} FWD_BATCH=${FWD_BATCH:-$fb} FWD_SEQ=${FWD_SEQ:-$fs}
ROWS=${ROWS:-2000}
SHAPE=(--vocab "$VOCAB" --hidden "$HIDDEN" --inter "$INTER" --layers "$LAYERS" --heads "$HEADS" --kv-heads "$KV_HEADS"
       --rope default --rope-theta 10000 --max-pos 4096 --batch "$BATCH" --seq "$SEQ")
SHARD=${SHARD:-2GB}
[ "$SMOKE" = 1 ] && SHARD=${SMOKE_SHARD:-100KB}  # the tiny checkpoint shards too
# What prepare_data.py gave on the CPU machine (tokenizers 0.23.3, transformers 5.25) for ROWS=2000, SEED=0.
EXPECT_BIN_SHA=${EXPECT_BIN_SHA:-ae7e4d4387961eeb}
EXPECT_MASK_SHA=${EXPECT_MASK_SHA:-090ff4b0b5f44586}

HF_DIR=$WORK/hf_model CFG_DIR=$WORK/cfg CKPT=$WORK/ckpt EXPORTED=$WORK/hf_export DATA=$WORK/data FWD=$WORK/fwd
mkdir -p "$OUT" "$WORK"
# This script's own files only (OUT may be a folder others write to).
rm -rf "$HF_DIR" "$CFG_DIR" "$CKPT" "$EXPORTED" "$DATA" "$FWD" "$WORK"/model.* "$WORK"/*.plan
rm -f "$OUT"/sft_stages.jsonl "$OUT"/sft_peer.jsonl "$OUT"/sft_megac.* "$OUT"/sft_export.log "$OUT"/sft_forward.log \
  "$OUT"/sft_compile.log "$OUT"/sft_data.log "$OUT"/sft_loop.json "$OUT"/sft_exported_files.txt
for f in "$MEGAC" "$PEER" "$EXPORT" "$PREP" "$TOK/tokenizer.json"; do
  [ -e "$f" ] || { echo "sft_loop.sh: $f is missing (carry it: see the header of $0)" >&2; exit 2; }
done
# shellcheck disable=SC2317  # called by the trap
cleanup() { [ "${KEEP_CKPT:-0}" = 1 ] || rm -rf "$HF_DIR" "$CKPT" "$EXPORTED"; }
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
KEEP=25  # seconds kept for the later stages' minimum and the table
stage() { STAGE=$1; STAGE_T0=$SECONDS; echo; echo "== $2 ($(date +%T), $((SECONDS - T_ALL)) s in)"; }
done_stage() {
  echo "-- $STAGE: rc $1, $((SECONDS - STAGE_T0)) s"
  printf '{"stage": "%s", "rc": %d, "wall_s": %d}\n' "$STAGE" "$1" "$((SECONDS - STAGE_T0))" >>"$OUT/sft_stages.jsonl"
}
# peer MODE LIMIT [args...]: bench/finetune_peer.py, its JSON lines appended to sft_peer.jsonl.
peer() {
  local mode=$1 limit=$2
  shift 2
  timeout "$limit" "$PY" "$PEER" "$mode" --device "$DEVICE" --out "$OUT/sft_peer.jsonl" "$@" 2>&1 |
    grep -v -i -E 'warn|^\s*$|"step": ' | cut -c1-400 | tail -n 12
  return "${PIPESTATUS[0]}"
}
sha() { sha256sum "$1" 2>/dev/null | cut -c1-16; }

stage machine "machine"
if [ "$DEVICE" = cuda ]; then
  timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
echo "cpu: $(nproc) cores; memory $(free -g | awk '/Mem:/ {print $2 " GiB, " $7 " available"}');" \
  "disk free in $WORK: $(df -h "$WORK" | awk 'NR==2 {print $4}')"
timeout 60 "$PY" -c 'import torch, transformers, tokenizers, onnx; print("torch", torch.__version__, "transformers",
transformers.__version__, "tokenizers", tokenizers.__version__, "onnx", onnx.__version__)'
echo "optimizer (both sides): lr $LR, betas $BETAS, eps $EPS, weight decay $WD, constant, no clipping; seed $SEED"
echo "model: V$VOCAB H$HIDDEN I$INTER L$LAYERS A$HEADS/$KV_HEADS; batch $BATCH x seq $SEQ x $ACCUM micro-batches," \
  "$STEPS steps (PyTorch $PT_STEPS, first $CMP_STEPS checked); logits check on $FWD_BATCH x $FWD_SEQ"

# c, in the background from t=0 (CPU only): config.json -> shapes-only ONNX -> the fp32 plan.
BG_T0=$SECONDS
{
  t0=$SECONDS
  timeout 120 "$PY" "$PEER" make-checkpoint --config-only --dir "$CFG_DIR" "${SHAPE[@]}" &&
    timeout 300 "$PY" "$EXPORT" "$CFG_DIR" "$WORK/model.onnx"
  rc=$?
  echo "export: rc $rc, $((SECONDS - t0)) s"
  [ "$rc" = 0 ] || exit "$rc"
  t0=$SECONDS
  timeout 240 "$MEGAC" compile "$WORK/model.onnx" --batch "$BATCH" --seq "$SEQ" --compute fp32 "${OPT_FLAGS[@]}" \
    -o "$WORK/model.fp32.plan"
  rc=$?
  echo "compile --compute fp32 (batch $BATCH x seq $SEQ x $ACCUM): rc $rc, $((SECONDS - t0)) s"
  exit "$rc"
} >"$OUT/sft_compile.log" 2>&1 &
BG=$!

stage a "a. the checkpoint: transformers from a config, seed 0, save_pretrained(max_shard_size=$SHARD) in BF16, with $TOK"
peer make-checkpoint "$(lim 180 $KEEP)" --dir "$HF_DIR" "${SHAPE[@]}" --max-shard-size "$SHARD" --tokenizer "$TOK"
ck_rc=$?; done_stage $ck_rc
[ "$ck_rc" = 0 ] && du -b "$HF_DIR"/* | sed "s|$HF_DIR/||; s/^/  /"

stage b "b. SFT data: $ROWS synthetic rows -> tools/prepare_data.py --tokenizer $TOK"
data_rc=0
mkdir -p "$DATA"
if [ -n "${SFT_DATA:-}" ]; then
  cp "$SFT_DATA.bin" "$DATA/sft.bin" && cp "$SFT_DATA.mask" "$DATA/sft.mask" || data_rc=1
  echo "  SFT_DATA=$SFT_DATA (prepared elsewhere)"
else
  peer sft-jsonl "$(lim 60 $KEEP)" --jsonl "$DATA/sft.jsonl" --rows "$ROWS" --seed 0 || data_rc=1
  if [ "$data_rc" = 0 ]; then
    timeout "$(lim 120 $KEEP)" "$PY" "$PREP" --tokenizer "$TOK" --out "$DATA/sft" "$DATA/sft.jsonl" >"$OUT/sft_data.log" 2>&1
    data_rc=$?
    grep -v -i warn "$OUT/sft_data.log" | tail -n 3 | cut -c1-300
  fi
fi
if [ "$data_rc" = 0 ]; then
  bs=$(sha "$DATA/sft.bin") ms=$(sha "$DATA/sft.mask")
  same=""
  if [ -n "$EXPECT_BIN_SHA" ] && [ "$ROWS" = 2000 ] && [ -z "${SFT_DATA:-}" ]; then
    if [ "$bs" = "$EXPECT_BIN_SHA" ] && [ "$ms" = "$EXPECT_MASK_SHA" ]; then same=" (the CPU machine's, byte for byte)"
    else same=" (the CPU machine's were $EXPECT_BIN_SHA / $EXPECT_MASK_SHA: this tokenizers/transformers tokenizes differently)"; fi
  fi
  echo "  sha256: sft.bin $bs, sft.mask $ms$same"
  printf '{"bin_sha256_16": "%s", "mask_sha256_16": "%s"}\n' "$bs" "$ms" >>"$OUT/sft_data.log"
  peer input 30 --data "$DATA/sft.bin" --batch "$FWD_BATCH" --seq "$FWD_SEQ" --batch-dir "$FWD" || data_rc=1
fi
done_stage $data_rc

stage c.compile "c. wait: shapes-only export + compile --compute fp32 (in the background since $((BG_T0 - T_ALL)) s)"
t_end=$((SECONDS + $(lim 300 120)))
while kill -0 "$BG" 2>/dev/null && ((SECONDS < t_end)); do sleep 1; done
if kill -0 "$BG" 2>/dev/null; then
  echo "not done in time: stopping it"
  pkill -TERM -P "$BG" 2>/dev/null; kill "$BG" 2>/dev/null  # the background job and its children, by id
fi
wait "$BG"
bg_rc=$?
grep -E "^export|^compile|^plan:|rror" "$OUT/sft_compile.log" | cut -c1-300
done_stage $bg_rc

run_rc=1
if [ "$ck_rc" = 0 ] && [ "$data_rc" = 0 ] && [ "$bg_rc" = 0 ]; then
  stage c.run "c. megac run --weights DIR --data sft.bin --mask sft.mask, --compute fp32, $STEPS steps, --checkpoint-dir"
  timeout "$(lim 240 $((KEEP + 90)))" "$MEGAC" run "$WORK/model.fp32.plan" --device "$DEVICE" --weights "$HF_DIR" \
    --data "$DATA/sft.bin" --mask "$DATA/sft.mask" --steps "$STEPS" "${OPT_FLAGS[@]}" --checkpoint-dir "$CKPT" \
    --log "$OUT/sft_megac.jsonl" >"$OUT/sft_megac.log" 2>&1
  run_rc=$?
  grep -E "^weights|^training|^step |^checkpoint|^done|rror" "$OUT/sft_megac.log" | cut -c1-200 | tail -n 26
  done_stage $run_rc
fi

exp_rc=1
if [ "$run_rc" = 0 ]; then
  stage d "d. megac export ckpt --hf (fp32), --hf-config DIR"
  timeout "$(lim 120 $((KEEP + 60)))" "$MEGAC" export "$CKPT" --hf "$EXPORTED" --hf-config "$HF_DIR" >"$OUT/sft_export.log" 2>&1
  exp_rc=$?
  tail -n 8 "$OUT/sft_export.log" | cut -c1-200
  [ "$exp_rc" = 0 ] && (cd "$EXPORTED" && du -b -- *) | tee "$OUT/sft_exported_files.txt" | sed 's/^/  /'
  done_stage $exp_rc
fi

if [ "$exp_rc" = 0 ]; then
  stage e.megac "e. megac forward model.onnx --weights CKPT on the fixed input ($FWD_BATCH x $FWD_SEQ; CPU reference backend)"
  timeout "$(lim 150 $((KEEP + 60)))" "$MEGAC" forward "$WORK/model.onnx" --weights "$CKPT" --input "$FWD/ids.pb" \
    -o "$FWD/megac_logits.pb" >"$OUT/sft_forward.log" 2>&1
  fwd_rc=$?
  tail -n 4 "$OUT/sft_forward.log" | cut -c1-200
  done_stage $fwd_rc
  if [ "$fwd_rc" = 0 ]; then
    stage e.pytorch "e. from_pretrained(EXPORTED) in fp32: logits on the same input (and the untrained DIR's)"
    peer logits "$(lim 150 $((KEEP + 40)))" --dir "$EXPORTED" --batch-dir "$FWD" --megac-logits "$FWD/megac_logits.pb" \
      --ref-dir "$HF_DIR"
    done_stage $?
  fi
fi
[ "${KEEP_CKPT:-0}" = 1 ] || rm -rf "$CKPT" "$EXPORTED"

if [ "$ck_rc" = 0 ] && [ "$data_rc" = 0 ]; then
  stage f "f. PyTorch fine-tune of DIR on megac's batches (sampler reproduced), fp32, $PT_STEPS steps"
  peer sft-finetune "$(lim 200 10)" --dir "$HF_DIR" --data "$DATA/sft.bin" --mask "$DATA/sft.mask" --batch "$BATCH" \
    --seq "$SEQ" --grad-accum "$ACCUM" --seed "$SEED" --steps "$PT_STEPS" --lr "$LR" --betas "$BETAS" --eps "$EPS" \
    --weight-decay "$WD"
  done_stage $?
fi

stage table "table"
timeout 60 "$PY" - "$OUT" "$CMP_STEPS" "$((SECONDS - T_ALL))" <<'EOF'
import json, os, re, sys

out, ncmp = sys.argv[1], int(sys.argv[2])
res = {}


def jl(name):
    try:
        return [json.loads(l) for l in open(os.path.join(out, name)) if l.strip().startswith("{")]
    except (OSError, ValueError):
        return []


def text(name):
    try:
        return open(os.path.join(out, name)).read()
    except OSError:
        return ""


def peer(mode, **match):
    for r in jl("sft_peer.jsonl"):
        if r.get("mode") == mode and all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def count(n):
    return f"{n / 1e9:.3f} B" if n >= 1e8 else f"{n / 1e6:.3f} M"


ck = peer("make-checkpoint")
res["checkpoint"] = ck
print("checkpoint: " + (f"{count(ck['params'])} parameters, vocab {ck['vocab']}, {ck['bytes'] / 1e9:.3f} GB in "
      f"{sum(f.endswith('.safetensors') for f in ck['files'])} safetensors files (BF16); special tokens "
      f"{ck.get('special_tokens')}; built {ck['build_s']} s, saved {ck['save_s']} s" if ck else "failed"))
d = re.search(r"prepare_data: .*", text("sft_data.log"))
res["data"] = d.group(0) if d else None
print("data: " + (d.group(0) if d else "failed"))

# e. the logits check
lg = peer("logits")
res["logits"] = lg
print("\nlogits: megac forward --weights CKPT vs from_pretrained(megac export --hf) in fp32, TF32 off")
if lg and "rel_l2" in lg:
    p_logits = lg["rel_l2"] <= 1e-5
    print(f"  input {lg['shape'][0]} x {lg['shape'][1]}, vocab {lg['shape'][2]}; loaded dtypes {lg['dtypes']}, "
          f"{count(lg['params'])} parameters")
    print(f"  relative L2 {lg['rel_l2']:.3e} (bound 1e-5), max |diff| {lg['max_abs']:.3e}, argmax agree "
          f"{lg['argmax_agree'] * 100:.1f}%")
    if "rel_l2_vs_ref" in lg:
        print(f"  (the untrained model's logits differ from the exported one's by relative L2 {lg['rel_l2_vs_ref']:.3e}:"
              f" the {'export is the trained model' if lg['rel_l2_vs_ref'] > 1e-3 else 'steps barely moved it'})")
else:
    p_logits = False
    print("  not computed: " + ("shapes differ: %s" % lg if lg else "an earlier stage failed (see above)"))
print(f"  logits check: {'PASS' if p_logits else 'FAIL'}")

# f. the loss check and the sampler check
ms = [s for s in jl("sft_megac.jsonl") if "loss" in s]
ps = [s for s in jl("sft_peer.jsonl") if s.get("mode") == "sft-finetune" and "step" in s]
psum = peer("sft-finetune", summary=True)
n = max(len(ms), len(ps))
print(f"\nper-step loss: megac run --weights --mask (--compute fp32) vs PyTorch (fp32, TF32 off), "
      f"mean over the step's counted targets; the first {ncmp} checked (|diff| <= 5e-4)")
wl = [l for l in text("sft_megac.log").splitlines() if l.startswith(("weights", "training"))]
for w in wl:
    print("  megac: " + w[:220])
print(f"  {'step':>4} {'megac':>11} {'PyTorch':>11} {'|diff|':>10}  {'redrawn megac/PT':>16} {'counted':>7}"
      f" {'megac s':>8} {'PT s':>7}")
diffs, same_redraws, el = [], True, 0.0
for i in range(n):
    m = ms[i] if i < len(ms) else None
    p = ps[i] if i < len(ps) else None
    a, b = (m or {}).get("loss"), (p or {}).get("loss")
    dd = abs(a - b) if a is not None and b is not None else None
    if i < ncmp:
        diffs.append(dd)
    rm, rp = (m or {}).get("skipped_windows", 0) if m else None, (p or {}).get("redrawn")
    if m and p and rm != rp:
        same_redraws = False
    if m:
        t = m.get("step_s", m["elapsed_s"] - el)
        el = m["elapsed_s"]
    mark = "*" if i < ncmp else " "
    f = lambda x, s="{:.6f}": "-" if x is None else s.format(x)
    print(f"  {i + 1:>4}{mark}{f(a):>11} {f(b):>11} {f(dd, '{:.2e}'):>10}  {f(rm, '{}'):>7} / {f(rp, '{}'):<6} "
          f"{f((p or {}).get('counted'), '{}'):>7} {f(t if m else None, '{:.3f}'):>8} {f((p or {}).get('step_s'), '{:.3f}'):>7}")
p_loss = len(diffs) == ncmp and all(x is not None and x <= 5e-4 for x in diffs)
mx = max((x for x in diffs if x is not None), default=None)
print(f"  max |diff| over the first {ncmp}: {'-' if mx is None else f'{mx:.2e}'}")
print(f"  loss check: {'PASS' if p_loss else 'FAIL'}")
both = min(len(ms), len(ps))
p_sampler = both > 0 and same_redraws and both >= ncmp
total_redrawn = sum(s.get("skipped_windows", 0) for s in ms[:both])
print(f"  sampler check (windows redrawn each step, megac's skipped_windows == Python's, {both} steps, "
      f"{total_redrawn} redrawn in all): {'PASS' if p_sampler else 'FAIL'}")
res.update(megac_losses=[s["loss"] for s in ms], pytorch_losses=[s["loss"] for s in ps], diffs=diffs,
           megac_redrawn=[s.get("skipped_windows", 0) for s in ms], pytorch_redrawn=[s["redrawn"] for s in ps],
           pytorch_summary=psum, exported_files=text("sft_exported_files.txt").split("\n"),
           checks=dict(logits=p_logits, losses=p_loss, sampler=p_sampler))
stages = jl("sft_stages.jsonl")
res["stages"] = stages
print("\nwall time by stage (s): " + ", ".join(f"{s['stage']} {s['wall_s']}" for s in stages) +
      f"; total {sys.argv[3]} s so far")
ok = p_logits and p_loss and p_sampler
res["pass"] = ok
print(f"overall: {'PASS' if ok else 'FAIL'} (logits {'PASS' if p_logits else 'FAIL'}, losses "
      f"{'PASS' if p_loss else 'FAIL'}, sampler {'PASS' if p_sampler else 'FAIL'})")
json.dump(res, open(os.path.join(out, "sft_loop.json"), "w"), indent=1, default=str)
sys.exit(0 if ok else 1)
EOF
rc=$?
echo "total: $((SECONDS - T_ALL)) s"
exit $rc
