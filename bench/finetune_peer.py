"""The PyTorch side of bench/finetune_pretrained.sh: fine-tuning a Hugging Face checkpoint with
megac (`megac run PLAN --weights DIR`) beside PyTorch on the same weights and the same batch.

Modes (every mode appends JSON lines to --out, and prints them):
  make-checkpoint  (--config-only: writes DIR/config.json and nothing else) builds a Llama-shaped causal LM from a config with a fixed seed (it stands in
                   for a downloaded model), saves it with save_pretrained(DIR, max_shard_size) in
                   BF16, and writes the fixed batch beside it (--batch-dir): input ids drawn with
                   the seed, and as targets what the checkpoint itself predicts at each position
                   (its argmax, computed in bf16). With those targets a correct load of the weights
                   gives a loss far below ln(vocab), and weights that are wrong in any way (another
                   draw, a transposed matrix, a missing tensor) give about ln(vocab) or more: the
                   loss checks the weights, not only their statistics. --targets random draws them.
  finetune         from_pretrained(DIR) as float32 master weights on --device, then N steps of
                   torch.optim.AdamW (no clipping, constant lr) on the fixed batch; --compute fp32
                   (TF32 off) or bf16 (autocast). Loss: the mean cross-entropy over all positions
                   of the fp32 logits against the targets (already shifted), as megac's.
  forward-loss     from_pretrained(DIR) in bf16 on --device, one forward on the batch, the loss as
                   above (cross-entropy of the logits cast to fp32). No host copy of the model is
                   kept when --device is cuda (loaded straight to the GPU where the installed
                   transformers can; else loaded and moved, then the host copy freed).

The batch files: ids.pb / tgt.pb (ONNX TensorProto, int64 [batch, seq], for `megac run --input
--targets`) and ids.npy / tgt.npy (the same arrays, read here).

Usage (see bench/finetune_pretrained.sh):
  finetune_peer.py make-checkpoint --dir D --batch-dir X --vocab V --hidden H --inter I --layers L
                   --heads A --kv-heads K [--rope default|llama3] --batch B --seq S [--device cuda]
  finetune_peer.py finetune --dir D --batch-dir X --steps 5 --lr 1e-4 --betas 0.9,0.95 --eps 1e-8
                   --weight-decay 0.1 --compute fp32|bf16 [--device cuda]
  finetune_peer.py forward-loss --dir D --batch-dir X [--device cuda]
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import transformers as tf

LLAMA31_ROPE = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                    high_freq_factor=4.0, original_max_position_embeddings=8192)


def emit(args, rec):
    rec = dict(mode=args.mode, **rec)
    line = json.dumps(rec)
    print(line, flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def setup_precision(fp32_exact):
    # fp32 means fp32: no TF32 in matmuls or convolutions (megac --compute fp32 does none)
    torch.backends.cuda.matmul.allow_tf32 = not fp32_exact and torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = not fp32_exact and torch.backends.cudnn.allow_tf32
    if fp32_exact:
        torch.set_float32_matmul_precision("highest")


def make_config(a):
    rope = LLAMA31_ROPE if a.rope == "llama3" else dict(rope_type="default", rope_theta=a.rope_theta)
    cfg = tf.LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.inter,
                         num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                         max_position_embeddings=a.max_pos, rope_parameters=rope, tie_word_embeddings=False,
                         initializer_range=0.02)
    cfg._attn_implementation = "sdpa"
    return cfg


def cross_entropy(logits, tgt):
    """megac's loss: the mean over every position of the fp32 logits' cross-entropy."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def write_batch(batch_dir, ids, tgt):
    from onnx import numpy_helper
    os.makedirs(batch_dir, exist_ok=True)
    for name, arr in (("ids", ids), ("tgt", tgt)):
        arr = np.ascontiguousarray(arr, dtype=np.int64)
        np.save(os.path.join(batch_dir, name + ".npy"), arr)
        with open(os.path.join(batch_dir, name + ".pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr).SerializeToString())


def read_batch(batch_dir, dev):
    ids = torch.from_numpy(np.load(os.path.join(batch_dir, "ids.npy"))).to(dev)
    tgt = torch.from_numpy(np.load(os.path.join(batch_dir, "tgt.npy"))).to(dev)
    return ids, tgt


def make_checkpoint(a, dev):
    cfg = make_config(a)
    if a.config_only:  # config.json alone, for the shapes-only export to start before the weights exist
        cfg.save_pretrained(a.dir)
        emit(a, dict(dir=a.dir, config_only=True))
        return
    t0 = time.time()
    torch.manual_seed(a.seed)
    with torch.device(dev):  # on the GPU: a few seconds even for 8B
        model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    if next(model.parameters()).device.type != dev.type:  # a transformers that builds elsewhere: move it
        model = model.to(dev)
    model.eval()
    sync(dev)
    t_build = time.time() - t0
    params = sum(p.numel() for p in model.parameters())

    # The fixed batch: ids from the seed; targets what this checkpoint predicts (or random).
    rng = np.random.default_rng(a.seed)
    ids = rng.integers(0, a.vocab, (a.batch, a.seq), dtype=np.int64)
    t1 = time.time()
    if a.targets == "random":
        tgt = rng.integers(0, a.vocab, (a.batch, a.seq), dtype=np.int64)
    else:
        tgt = np.empty_like(ids)
        with torch.no_grad():
            for r in range(a.batch):  # a row at a time: the [seq, vocab] logits stay small
                x = torch.from_numpy(ids[r:r + 1]).to(dev)
                tgt[r] = model(input_ids=x, use_cache=False).logits[0].float().argmax(-1).cpu().numpy()
    write_batch(a.batch_dir, ids, tgt)
    t_batch = time.time() - t1

    t2 = time.time()
    model.save_pretrained(a.dir, max_shard_size=a.max_shard_size)
    t_save = time.time() - t2
    files = sorted(os.listdir(a.dir))
    size = sum(os.path.getsize(os.path.join(a.dir, f)) for f in files)
    emit(a, dict(dir=a.dir, params=params, bytes=size, files=files, dtype="bfloat16", seed=a.seed,
                 targets=a.targets, batch=a.batch, seq=a.seq, vocab=a.vocab, build_s=round(t_build, 2),
                 batch_s=round(t_batch, 2), save_s=round(t_save, 2),
                 torch=torch.__version__, transformers=tf.__version__, device=str(dev)))


def load_pretrained(a, dev, dtype):
    """from_pretrained straight onto `dev` where this transformers can (device_map), else on the
    host and then moved (the host copy is dropped with the moved-from tensors)."""
    kw = dict(dtype=dtype, attn_implementation="sdpa")
    if dev.type == "cuda":
        try:
            return tf.AutoModelForCausalLM.from_pretrained(a.dir, device_map=str(dev), **kw), "device_map"
        except (ImportError, ValueError, TypeError) as e:  # e.g. no accelerate
            print(f"from_pretrained(device_map): {e!r}; loading on the host and moving", file=sys.stderr)
    return tf.AutoModelForCausalLM.from_pretrained(a.dir, **kw).to(dev), "host_then_to"


def finetune(a, dev):
    setup_precision(fp32_exact=(a.compute == "fp32"))
    t0 = time.time()
    model, how = load_pretrained(a, dev, torch.float32)
    model.config.use_cache = False
    model.train()  # Llama has no dropout; train() as a fine-tune would
    sync(dev)
    t_load = time.time() - t0
    ids, tgt = read_batch(a.batch_dir, dev)
    b1, b2 = (float(x) for x in a.betas.split(","))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(b1, b2), eps=a.eps, weight_decay=a.weight_decay,
                            foreach=True)
    losses, times = [], []
    for step in range(1, a.steps + 1):
        sync(dev)
        ts = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=(a.compute == "bf16")):
            logits = model(input_ids=ids, use_cache=False).logits
        loss = cross_entropy(logits, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(dev)
        times.append(time.perf_counter() - ts)
        losses.append(float(loss.detach()))
        del logits, loss
        emit(a, dict(compute=a.compute, step=step, loss=losses[-1], step_s=round(times[-1], 4)))
    rec = dict(summary=True, compute=a.compute, losses=losses, step_s=times, load_s=round(t_load, 2), load=how,
               params=sum(p.numel() for p in model.parameters()), lr=a.lr, betas=[b1, b2], eps=a.eps,
               weight_decay=a.weight_decay, batch=list(ids.shape), device=str(dev),
               tf32=bool(torch.backends.cuda.matmul.allow_tf32))
    if dev.type == "cuda":
        rec["gpu_peak_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    emit(a, rec)


def forward_loss(a, dev):
    t0 = time.time()
    model, how = load_pretrained(a, dev, torch.bfloat16)
    model.eval()
    sync(dev)
    t_load = time.time() - t0
    ids, tgt = read_batch(a.batch_dir, dev)
    t1 = time.time()
    with torch.no_grad():
        # a row at a time: the same loss (a mean over equally long rows), without [B*S, vocab] fp32 logits
        rows = [float(cross_entropy(model(input_ids=ids[r:r + 1], use_cache=False).logits, tgt[r:r + 1]))
                for r in range(ids.shape[0])]
    sync(dev)
    rec = dict(loss=float(np.mean(rows)), row_losses=rows, dtype="bfloat16", load_s=round(t_load, 2), load=how,
               forward_s=round(time.time() - t1, 2), batch=list(ids.shape), device=str(dev),
               params=sum(p.numel() for p in model.parameters()))
    if dev.type == "cuda":
        rec["gpu_peak_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    emit(a, rec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["make-checkpoint", "finetune", "forward-loss"])
    ap.add_argument("--dir", required=True, help="the save_pretrained directory")
    ap.add_argument("--batch-dir", default="", help="where ids/tgt .pb and .npy are (written by make-checkpoint)")
    ap.add_argument("--out", help="append the JSON lines to this file too")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    # make-checkpoint
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=5632)
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--rope", choices=["default", "llama3"], default="default")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--max-pos", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--targets", choices=["argmax", "random"], default="argmax")
    ap.add_argument("--max-shard-size", default="2GB")
    ap.add_argument("--config-only", action="store_true", help="write only DIR/config.json (the same config)")
    # finetune
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--betas", default="0.9,0.95")
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--compute", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    if not a.batch_dir and not (a.mode == "make-checkpoint" and a.config_only):
        ap.error("--batch-dir is required")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", 0)
    {"make-checkpoint": make_checkpoint, "finetune": finetune, "forward-loss": forward_loss}[a.mode](a, dev)


if __name__ == "__main__":
    main()
