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

Modes for bench/sft_loop.sh (SFT data, megac's sampler, the exported model):
  sft-jsonl        writes --jsonl: a deterministic synthetic SFT set (its own splitmix64 generator,
                   no library randomness: the same bytes with any Python), --rows rows of
                   {"prompt", "response"} (arithmetic, sentences, and long documents to summarize,
                   whose prompts hold windows with no counted target) and chat {"messages": [...]}
                   (system, user and assistant turns, one or two exchanges).
  sft-finetune     from_pretrained(DIR) as float32 masters, then --steps AdamW steps on megac's own
                   batches: the token file --data (+ --mask) read in windows exactly as megac's
                   sampler draws them (runtime/train/Data.cpp: splitmix64 of (seed, index), masked
                   windows with no counted target redrawn, masked targets -100; --grad-accum
                   micro-batches a step); loss and gradient the mean over the step's counted targets.
                   Records each step's loss, redrawn windows and counted targets.
  input            the fixed input for the logits check: --batch x --seq ids from the token file
                   --data, rows at evenly spaced offsets (ids.pb / ids.npy in --batch-dir).
  logits           from_pretrained(DIR) in fp32 (TF32 off), its logits on ids.npy against
                   megac forward's (--megac-logits, a TensorProto): relative L2 and max |diff|;
                   --ref-dir: the same input through another model (the untrained one), to show
                   the check can tell them apart.

The batch files: ids.pb / tgt.pb (ONNX TensorProto, int64 [batch, seq], for `megac run --input
--targets`) and ids.npy / tgt.npy (the same arrays, read here).

Usage (see bench/finetune_pretrained.sh):
  finetune_peer.py make-checkpoint --dir D --batch-dir X --vocab V --hidden H --inter I --layers L
                   --heads A --kv-heads K [--rope default|llama3] --batch B --seq S [--device cuda]
  finetune_peer.py finetune --dir D --batch-dir X --steps 5 --lr 1e-4 --betas 0.9,0.95 --eps 1e-8
                   --weight-decay 0.1 --compute fp32|bf16 [--device cuda]
  finetune_peer.py forward-loss --dir D --batch-dir X [--device cuda]
  finetune_peer.py sft-jsonl --jsonl FILE --rows N [--seed 0]
  finetune_peer.py sft-finetune --dir D --data P.bin [--mask P.mask] --batch B --seq S [--grad-accum A]
                   [--seed 0] --steps N --lr .. --betas .. --eps .. --weight-decay .. [--device cuda]
  finetune_peer.py input --data P.bin --batch B --seq S --batch-dir X
  finetune_peer.py logits --dir OUT --batch-dir X --megac-logits L.pb [--ref-dir D] [--device cuda]
make-checkpoint without --batch-dir writes the checkpoint alone (no fixed batch).
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
    # Without --batch-dir (bench/sft_loop.sh: its data is a token file), no batch.
    t1 = time.time()
    if a.batch_dir:
        rng = np.random.default_rng(a.seed)
        ids = rng.integers(0, a.vocab, (a.batch, a.seq), dtype=np.int64)
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
    if a.tokenizer:
        special = with_tokenizer(model, a.tokenizer)

    t2 = time.time()
    model.save_pretrained(a.dir, max_shard_size=a.max_shard_size)
    if a.tokenizer:  # the tokenizer beside the weights, as a downloaded model has it
        import shutil
        for f in sorted(os.listdir(a.tokenizer)):
            if f.startswith(("tokenizer", "special_tokens_map")) and f.endswith(".json"):
                shutil.copy(os.path.join(a.tokenizer, f), os.path.join(a.dir, f))
    t_save = time.time() - t2
    files = sorted(os.listdir(a.dir))
    size = sum(os.path.getsize(os.path.join(a.dir, f)) for f in files)
    emit(a, dict(dir=a.dir, params=params, bytes=size, files=files, dtype="bfloat16", seed=a.seed,
                 targets=a.targets if a.batch_dir else None, batch=a.batch, seq=a.seq, vocab=a.vocab,
                 tokenizer=a.tokenizer or None, special_tokens=special if a.tokenizer else None,
                 build_s=round(t_build, 2),
                 batch_s=round(t_batch, 2), save_s=round(t_save, 2),
                 torch=torch.__version__, transformers=tf.__version__, device=str(dev)))


def with_tokenizer(model, tok_dir):
    """The config's special token ids from the tokenizer's (bos/eos/pad by tokenizer_config.json,
    ids by tokenizer.json's added tokens); generation stops at eos or a chat turn's end
    (<|im_end|>) where the vocabulary has one. Returns the ids set."""
    cfg = json.load(open(os.path.join(tok_dir, "tokenizer_config.json")))
    added = {t["content"]: t["id"] for t in json.load(open(os.path.join(tok_dir, "tokenizer.json")))["added_tokens"]}

    def tid(key):
        v = cfg.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        return added.get(v) if v is not None else None

    ids = dict(bos_token_id=tid("bos_token"), eos_token_id=tid("eos_token"), pad_token_id=tid("pad_token"))
    for k, v in ids.items():
        setattr(model.config, k, v)
    stop = [i for i in (ids["eos_token_id"], added.get("<|im_end|>")) if i is not None]
    model.generation_config.bos_token_id = ids["bos_token_id"]
    model.generation_config.eos_token_id = stop if len(stop) > 1 else (stop[0] if stop else None)
    model.generation_config.pad_token_id = ids["pad_token_id"]
    return dict(ids, stop=stop)


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


# ---- bench/sft_loop.sh --------------------------------------------------------------------------

M64 = (1 << 64) - 1


def mix(x):
    """splitmix64's mix, as runtime/train/Data.cpp's `mix` (uint64 arithmetic)."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


class Rng:
    """A counter-based generator on `mix`: the same draws with any Python or numpy."""

    def __init__(self, seed):
        self.state, self.n = mix(seed & M64), 0

    def below(self, n):
        self.n += 1
        return mix(self.state ^ self.n) % n

    def pick(self, seq):
        return seq[self.below(len(seq))]


WORDS = ("the model reads every token of a long sentence and learns which word comes next while the "
         "optimizer moves its weights a little at each step of training on a batch of windows drawn from "
         "the data with a fixed seed so that two runs see the same tokens in the same order and their "
         "losses can be compared one step at a time river mountain garden library window kitchen winter "
         "summer morning evening quiet bright careful simple green yellow small large old new first last "
         "good free software license copy program source code public work other terms conditions modify "
         "distribute permission notice warranty author user version").split()
NAMES = ("Ada", "Alan", "Grace", "Edsger", "Barbara", "Donald", "Frances", "John", "Leslie", "Margaret")
TOPICS = ("gardens", "rivers", "libraries", "compilers", "winter mornings", "free software", "kitchens",
          "mountains", "old programs", "licenses")
SYSTEMS = ("You are a helpful assistant.", "You answer briefly and exactly.",
           "You are a careful assistant who explains each step.")


def sentence(r, lo, hi):
    n = lo + r.below(hi - lo + 1)
    w = [r.pick(WORDS) for _ in range(n)]
    return (" ".join(w)).capitalize() + "."


def paragraph(r, sentences):
    return " ".join(sentence(r, 6, 18) for _ in range(sentences))


def sft_row(r, i):
    k = r.below(20)
    if k < 6:  # arithmetic, prompt/response
        x, y = r.below(1000), r.below(1000)
        op, f = r.pick((("plus", lambda a, b: a + b), ("minus", lambda a, b: a - b), ("times", lambda a, b: a * b)))
        return {"prompt": f"What is {x} {op} {y}?", "response": f"{x} {op} {y} is {f(x, y)}."}
    if k < 10:  # a sentence on a topic, prompt/response
        t = r.pick(TOPICS)
        return {"prompt": f"Write {1 + r.below(3)} sentences about {t}, for {r.pick(NAMES)}.",
                "response": paragraph(r, 1 + r.below(3))}
    if k < 18:  # chat: system, user, assistant (one or two exchanges)
        msgs = [{"role": "system", "content": r.pick(SYSTEMS)}]
        for _ in range(1 + r.below(2)):
            msgs.append({"role": "user", "content": f"{r.pick(NAMES)} asks: " + sentence(r, 5, 14)[:-1] + "?"})
            msgs.append({"role": "assistant", "content": paragraph(r, 1 + r.below(3))})
        return {"messages": msgs}
    if k < 19:  # a long document to summarize: a long prompt, windows without a counted target
        doc = "\n\n".join(paragraph(r, 4 + r.below(6)) for _ in range(6 + r.below(10)))
        return {"prompt": "Summarize the following text in one sentence.\n\n" + doc, "response": sentence(r, 8, 16)}
    # a short chat with a long user turn
    doc = paragraph(r, 8 + r.below(10))
    return {"messages": [{"role": "user", "content": "Read this and name its topic.\n\n" + doc},
                         {"role": "assistant", "content": f"It is about {r.pick(TOPICS)}."}]}


def sft_jsonl(a, dev):
    r = Rng(a.seed)
    kinds = {}
    with open(a.jsonl, "w") as f:
        for i in range(a.rows):
            row = sft_row(r, i)
            kind = "messages" if "messages" in row else "prompt/response"
            kinds[kind] = kinds.get(kind, 0) + 1
            f.write(json.dumps(row, ensure_ascii=True, sort_keys=True) + "\n")
    emit(a, dict(jsonl=a.jsonl, rows=a.rows, kinds=kinds, bytes=os.path.getsize(a.jsonl), seed=a.seed))


def read_tokens(path, vocab=None):
    """megac's headerless token file (uint16; uint32 when the model's vocabulary exceeds 65536, as
    --vocab says) or llm.c's .bin."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size >= 1024:
        h = raw[:12].view(np.int32)
        if h[0] == 20240520:
            return raw[1024:].view(np.uint16 if h[1] == 1 else np.uint32)[:h[2]].astype(np.int64)
    return raw.view(np.uint32 if vocab and vocab > 65536 else np.uint16).astype(np.int64)


class MegacSampler:
    """megac's TokenData::batch (runtime/train/Data.cpp), exactly: window b of batch `index` starts at
    mix(mix(seed) ^ (index*B + b)) % (n - seq); with a mask, a window whose seq targets count none is
    drawn again at mix(slot ^ draw) % (n - seq), draw = 1, 2, ...; targets whose mask byte is 0
    become ignore_index."""

    def __init__(self, tokens, mask, batch, seq, seed, ignore_index=-100):
        self.t, self.m, self.B, self.S = tokens, mask, batch, seq
        self.seed, self.ig = seed, ignore_index
        self.windows = len(tokens) - seq
        if self.windows < 1:
            raise SystemExit(f"{len(tokens)} tokens is shorter than one window of seq+1 = {seq + 1}")
        if mask is not None:  # any counted target in the window starting at s: mask[s+1 .. s+seq]
            c = np.concatenate([[0], np.cumsum(mask != 0, dtype=np.int64)])
            self.counted = c[seq + 1:seq + 1 + self.windows] - c[1:1 + self.windows]

    def batch(self, index):
        ids = np.empty((self.B, self.S), np.int64)
        tgt = np.empty((self.B, self.S), np.int64)
        redrawn, starts = 0, []
        for b in range(self.B):
            slot = mix(mix(self.seed) ^ ((index * self.B + b) & M64))
            start, draw = slot % self.windows, 1
            while self.m is not None and self.counted[start] == 0:
                if draw == 1000:
                    raise SystemExit("1000 windows in a row hold no counted target")
                redrawn += 1
                start = mix(slot ^ draw) % self.windows
                draw += 1
            starts.append(int(start))
            ids[b] = self.t[start:start + self.S]
            tgt[b] = self.t[start + 1:start + 1 + self.S]
            if self.m is not None:
                tgt[b][self.m[start + 1:start + 1 + self.S] == 0] = self.ig
        return ids, tgt, redrawn, starts


def sft_finetune(a, dev):
    setup_precision(fp32_exact=True)
    t0 = time.time()
    model, how = load_pretrained(a, dev, torch.float32)
    model.config.use_cache = False
    model.train()
    sync(dev)
    t_load = time.time() - t0
    vocab = model.config.vocab_size
    tokens = read_tokens(a.data, vocab)
    mask = np.fromfile(a.mask, dtype=np.uint8) if a.mask else None
    if mask is not None and mask.size != tokens.size:
        raise SystemExit(f"{a.mask}: {mask.size} bytes for {tokens.size} tokens")
    if tokens.max() >= vocab:
        raise SystemExit(f"{a.data}: token {tokens.max()} outside the vocabulary of {vocab}")
    sampler = MegacSampler(tokens, mask, a.batch, a.seq, a.seed)
    b1, b2 = (float(x) for x in a.betas.split(","))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(b1, b2), eps=a.eps, weight_decay=a.weight_decay,
                            foreach=True)
    losses, times, index = [], [], 0
    for step in range(1, a.steps + 1):
        sync(dev)
        ts = time.perf_counter()
        mbs, redrawn, starts = [], 0, []
        for _ in range(max(a.grad_accum, 1)):
            ids, tgt, r, st = sampler.batch(index)
            index += 1
            redrawn += r
            starts += st
            mbs.append((torch.from_numpy(ids).to(dev), torch.from_numpy(tgt).to(dev)))
        counted = [int((t != -100).sum()) for _, t in mbs]
        total = sum(counted)
        loss_sum = 0.0
        for (ids, tgt), c in zip(mbs, counted):
            if c == 0:
                continue
            logits = model(input_ids=ids, use_cache=False).logits
            # the step's loss: the sum over its counted targets / their number, across micro-batches
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                   ignore_index=-100, reduction="sum") / total
            loss.backward()
            loss_sum += float(loss.detach())
            del logits, loss
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(dev)
        times.append(time.perf_counter() - ts)
        losses.append(loss_sum)
        emit(a, dict(step=step, loss=loss_sum, counted=total, redrawn=redrawn, starts=starts,
                     step_s=round(times[-1], 4)))
    rec = dict(summary=True, compute="fp32", losses=losses, step_s=times, load_s=round(t_load, 2), load=how,
               params=sum(p.numel() for p in model.parameters()), lr=a.lr, betas=[b1, b2], eps=a.eps,
               weight_decay=a.weight_decay, batch=a.batch, seq=a.seq, grad_accum=a.grad_accum, seed=a.seed,
               tokens=int(tokens.size), counted_tokens=int((mask != 0).sum()) if mask is not None else None,
               device=str(dev), tf32=bool(torch.backends.cuda.matmul.allow_tf32))
    if dev.type == "cuda":
        rec["gpu_peak_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    emit(a, rec)


def make_input(a, dev):
    tokens = read_tokens(a.data)
    span = len(tokens) - a.seq
    offs = [(r * span) // max(a.batch, 1) for r in range(a.batch)]
    ids = np.stack([tokens[o:o + a.seq] for o in offs]).astype(np.int64)
    from onnx import numpy_helper
    os.makedirs(a.batch_dir, exist_ok=True)
    np.save(os.path.join(a.batch_dir, "ids.npy"), ids)
    with open(os.path.join(a.batch_dir, "ids.pb"), "wb") as f:
        f.write(numpy_helper.from_array(ids).SerializeToString())
    emit(a, dict(batch_dir=a.batch_dir, shape=list(ids.shape), offsets=offs))


def logits_check(a, dev):
    from onnx import TensorProto, numpy_helper
    setup_precision(fp32_exact=True)
    ids = torch.from_numpy(np.load(os.path.join(a.batch_dir, "ids.npy"))).to(dev)
    t = TensorProto()
    with open(a.megac_logits, "rb") as f:
        t.ParseFromString(f.read())
    mg = torch.from_numpy(numpy_helper.to_array(t).astype(np.float64))

    def run(d):
        t0 = time.time()
        model = tf.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="sdpa").to(dev)
        model.eval()
        with torch.no_grad():
            lg = model(input_ids=ids, use_cache=False).logits.double().cpu()
        dtypes = sorted({str(p.dtype) for p in model.parameters()})
        n = sum(p.numel() for p in model.parameters())
        del model
        return lg, dtypes, n, round(time.time() - t0, 2)

    def rel(x, y):
        return float((x - y).norm() / y.norm())

    pt, dtypes, n, secs = run(a.dir)
    rec = dict(dir=a.dir, shape=list(pt.shape), megac_shape=list(mg.shape), params=n, dtypes=dtypes, load_run_s=secs,
               device=str(dev))
    if list(pt.shape) == list(mg.shape):
        rec.update(rel_l2=rel(mg, pt), max_abs=float((mg - pt).abs().max()), ref_norm=float(pt.norm()))
        rec["argmax_agree"] = float((mg.argmax(-1) == pt.argmax(-1)).double().mean())
    if a.ref_dir:  # the untrained model: how far the fine-tune moved the logits
        ref, _, _, _ = run(a.ref_dir)
        rec["ref_dir"] = a.ref_dir
        rec["rel_l2_vs_ref"] = rel(ref, pt)
    emit(a, rec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["make-checkpoint", "finetune", "forward-loss", "sft-jsonl", "sft-finetune",
                                     "input", "logits"])
    ap.add_argument("--dir", default="", help="the save_pretrained directory")
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
    ap.add_argument("--tokenizer", default="", help="make-checkpoint: copy this tokenizer into DIR, its special "
                    "token ids into the config")
    # sft-jsonl, sft-finetune, input, logits
    ap.add_argument("--jsonl", help="sft-jsonl: the JSONL to write")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--data", help="the token file (megac's --data)")
    ap.add_argument("--mask", default="", help="its loss mask (megac's --mask)")
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--megac-logits", help="logits: megac forward's output (TensorProto)")
    ap.add_argument("--ref-dir", default="", help="logits: another model directory to compare with")
    # finetune
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--betas", default="0.9,0.95")
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--compute", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    need = {"make-checkpoint": ["dir"], "finetune": ["dir", "batch_dir"], "forward-loss": ["dir", "batch_dir"],
            "sft-jsonl": ["jsonl"], "sft-finetune": ["dir", "data"], "input": ["data", "batch_dir"],
            "logits": ["dir", "batch_dir", "megac_logits"]}[a.mode]
    for k in need:
        if not getattr(a, k):
            ap.error(f"{a.mode} needs --{k.replace('_', '-')}")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", 0)
    {"make-checkpoint": make_checkpoint, "finetune": finetune, "forward-loss": forward_loss, "sft-jsonl": sft_jsonl,
     "sft-finetune": sft_finetune, "input": make_input, "logits": logits_check}[a.mode](a, dev)


if __name__ == "__main__":
    main()
