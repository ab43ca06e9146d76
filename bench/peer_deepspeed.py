# DeepSpeed ZeRO-3 with parameters and optimizer offloaded to the CPU (DeepSpeedCPUAdam), the
# MegaTrain paper's own baseline, on the same Llama shape and batch as peer_pytorch.py.
# Measured on the H200 machine on 2026-12-04 (DeepSpeed 0.19.8, torch 2.11): 2.579 s/step on the
# 2.81B shape at 8 x 2048 (107 TFLOPS 6PT), 11.5 GiB GPU peak; steps varied 2.25-3.01 s.
#
# The GPU machine has torch but no DeepSpeed and no registry:
#   here:   bench/fetch_deepspeed.sh      (DeepSpeed's sdist and the wheels it needs into .whl/)
#   there:  carry .whl; `. bench/deepspeed_env.sh` unpacks them into /tmp and sets PYTHONPATH,
#           DS_ACCELERATOR=cuda, CUDA_HOME and TORCH_EXTENSIONS_DIR (DeepSpeedCPUAdam is JIT-built
#           there, about a minute); bench/bench2.8b.sh does both when .whl is present.
# Usage on the GPU machine: python peer_deepspeed.py  (SHAPE=8b for Llama-3.1-8B). One JSON line,
# also written to $OUT/baseline_deepspeed.json. bf16 compute, fp32 master weights and moments on
# the host, gradient checkpointing, 8 x 2048 tokens a step.
import json, os, time, statistics as st
import torch, transformers as tf
import deepspeed

OUT = os.environ.get("OUT", "/tmp")
B, S = 8, 2048
for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
             ("MASTER_PORT", "29512")):
    os.environ.setdefault(k, v)
cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=3072, intermediate_size=8192, num_hidden_layers=26,
                     num_attention_heads=24, num_key_value_heads=8, max_position_embeddings=4096,
                     tie_word_embeddings=False)
if os.environ.get("SHAPE") == "8b":
    cfg = tf.LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096,
                         tie_word_embeddings=False)
cfg._attn_implementation = "sdpa"
ds = {
    "train_micro_batch_size_per_gpu": B, "gradient_accumulation_steps": 1,
    "bf16": {"enabled": True},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "zero_optimization": {
        "stage": 3,
        "offload_param": {"device": "cpu", "pin_memory": True},
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "overlap_comm": True, "contiguous_gradients": True,
        "reduce_bucket_size": int(5e8), "stage3_prefetch_bucket_size": int(5e8),
        "stage3_param_persistence_threshold": int(1e6), "stage3_max_live_parameters": int(1e9),
    },
    "steps_per_print": 1000, "wall_clock_breakdown": False,
}
deepspeed.init_distributed(dist_backend="nccl")
torch.manual_seed(0)
res = {"mode": "deepspeed_zero3_offload", "shape": os.environ.get("SHAPE", "2.8b"), "B": B, "S": S,
       "deepspeed": deepspeed.__version__}
t0 = time.time()
with deepspeed.zero.Init(config_dict_or_path=ds):
    model = tf.LlamaForCausalLM(cfg)
model.gradient_checkpointing_enable()
model.config.use_cache = False
P = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds)
res["params_B"] = round(P / 1e9, 3); res["init_s"] = round(time.time() - t0, 1)
ids = torch.randint(0, cfg.vocab_size, (B, S), device="cuda")
ts = []
for i in range(int(os.environ.get("STEPS", "4")) + 1):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss); engine.step()
    torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    print("deepspeed", i, round(ts[-1], 3), float(loss), flush=True)
t = st.median(ts[1:])
tok = B * S
res.update(step_s=round(t, 3), tokens_per_s=round(tok / t), TFLOPS_6PT=round(6 * P * tok / t / 1e12, 1),
           gpu_peak_GiB=round(torch.cuda.max_memory_allocated() / 2**30, 1), steps=[round(x, 3) for x in ts])
print(json.dumps(res), flush=True)
with open(os.path.join(OUT, "baseline_deepspeed.json"), "w") as f:
    json.dump(res, f)
