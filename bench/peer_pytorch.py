# PyTorch peers for the megac benchmark, measured the way a user would run them
# (bench/bench2.8b.sh runs it; kept as it came with the project's issue 5).
# Usage on the GPU machine: python3 peer_pytorch.py gpu|fsdp|fsdp_fused  (SHAPE=8b for the
# Llama-3.1-8B shape; default the 2.81B Llama shape; BATCH and SEQ for another batch than 8 x 2048;
# PEER_STEPS timed steps after the first, default 4).
# Prints one JSON line; writes it to $OUT.
# Measured 2026-12-02 on the lent H200: gpu 0.924 s/step, fsdp_fused 1.946, fsdp 4.116;
# at SHAPE=8b, gpu runs out of memory.
# Modes:  (a) everything resident on the GPU (bf16 autocast, fp32
# master weights, fused AdamW on the GPU) -- the ceiling when a model fits;
# (b) PyTorch FSDP2 with CPUOffloadPolicy on one GPU -- the framework-native
# ZeRO-3-offload peer. TFLOPS = 6 * params * tokens / step time (the MegaTrain
# paper's convention), plus the same with attention FLOPs.
import json, os, sys, time, statistics as st
import torch, transformers as tf

OUT = os.environ.get("OUT", "/tmp")
mode = sys.argv[1]
layers = int(sys.argv[2]) if len(sys.argv) > 2 else 26
B, S = int(os.environ.get("BATCH", 8)), int(os.environ.get("SEQ", 2048))
cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=3072, intermediate_size=8192, num_hidden_layers=layers,
                     num_attention_heads=24, num_key_value_heads=8, max_position_embeddings=max(4096, S),
                     tie_word_embeddings=False)
if os.environ.get("SHAPE") == "8b":  # Llama-3.1-8B shape
    cfg = tf.LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=max(4096, S),
                         tie_word_embeddings=False)
cfg._attn_implementation = "sdpa"
res = {"mode": mode, "shape": os.environ.get("SHAPE", "2.8b"), "B": B, "S": S}

def run(model, opt, steps=4):
    ids = torch.randint(0, cfg.vocab_size, (B, S), device="cuda")
    ts = []
    for i in range(steps + 1):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(mode == "gpu")):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
        print(mode, i, round(ts[-1], 3), float(loss), flush=True)
    return st.median(ts[1:])

torch.manual_seed(0)
t0 = time.time()
with torch.device("cuda"):
    model = tf.LlamaForCausalLM(cfg)
P = sum(p.numel() for p in model.parameters())
res["params_B"] = round(P / 1e9, 3); res["init_s"] = round(time.time() - t0, 1)
model.gradient_checkpointing_enable()
model.config.use_cache = False
if mode == "gpu":
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
else:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard, CPUOffloadPolicy, MixedPrecisionPolicy
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("nccl", rank=0, world_size=1)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    off = CPUOffloadPolicy(pin_memory=True)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp, offload_policy=off)
    fully_shard(model, mp_policy=mp, offload_policy=off)
    fused = mode == "fsdp_fused"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=fused, foreach=not fused)
    res["cpu_adam"] = "fused" if fused else "foreach"
t = run(model, opt, int(os.environ.get("PEER_STEPS", 4)))
tok = B * S
attn = 12 * cfg.num_hidden_layers * cfg.hidden_size * S * tok / 2  # causal attention fwd+bwd, halved
res.update(step_s=round(t, 3), tokens_per_s=round(tok / t), TFLOPS_6PT=round(6 * P * tok / t / 1e12, 1),
           TFLOPS_with_attn=round((6 * P * tok + attn) / t / 1e12, 1),
           gpu_peak_GiB=round(torch.cuda.max_memory_allocated() / 2**30, 1))
print(json.dumps(res), flush=True)
with open(os.path.join(OUT, f"baseline_{mode}.json"), "w") as f:
    json.dump(res, f)
