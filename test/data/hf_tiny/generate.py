"""Generates test/data/hf_tiny: tiny Hugging Face causal LMs saved the way users get them
(save_pretrained, safetensors), the shapes-only ONNX export of each config
(tools/export_shapes_only.py) and PyTorch reference logits, for megac's checkpoint tests.

Run from the repo root with a Python that has torch, transformers, onnx and safetensors
(onnxruntime optional: with it the script also checks each model.onnx against the references):
    python test/data/hf_tiny/generate.py
Deterministic (fixed seeds; CPU, fp32). It rewrites every file under test/data/hf_tiny except
README.md and itself. See README.md there for what each file is.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import safetensors
import torch
import transformers as tf
from onnx import numpy_helper
from safetensors import safe_open

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
EXPORT = os.path.join(REPO, "tools", "export_shapes_only.py")
B, T = 2, 16
BF16_SHARD = "100KB"  # ~250 KB of bf16 weights: 3 shards


def llama_config(tie):
    return tf.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                          rms_norm_eps=1e-5, tie_word_embeddings=tie)


def build(cfg):
    """As test/data/make_fixtures.py builds its models: seed 0, then the fresh all-ones norm scales
    (and any all-zeros bias) perturbed by 0.1 N(0, 1), as a trained model's would be."""
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(cfg).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1 and (bool((p == 1).all()) or bool((p == 0).all())):
                p.add_(0.1 * torch.randn_like(p))
    return model


def save_pb(t, path, name):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(t.detach().cpu().numpy(), name).SerializeToString())


def logits_of(model_dir, dtype):
    """Reference logits in fp32: the checkpoint loaded back by from_pretrained in `dtype` (the
    checkpoint's own), then cast to float32, eager attention on the CPU."""
    model = tf.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager")
    model = model.float().eval()
    with torch.no_grad():
        return model(input_ids=IDS, use_cache=False).logits


def clean(d):
    if os.path.isdir(d):
        shutil.rmtree(d)


def export_shapes_only(model_dir, out):
    r = subprocess.run([sys.executable, EXPORT, model_dir, out], capture_output=True, text=True, cwd=REPO)
    if r.returncode:
        sys.exit(f"{EXPORT} failed:\n{r.stdout}\n{r.stderr}")
    print("  " + r.stdout.strip().splitlines()[-1].replace(REPO + "/", ""))
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    return m


def checkpoint_tensors(model_dir):
    """{name: (dtype, shape, file)} over every safetensors file of a save_pretrained directory."""
    out = {}
    for f in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with safe_open(f, "pt") as sf:
            for k in sf.keys():
                sl = sf.get_slice(k)
                out[k] = (sl.get_dtype(), sl.get_shape(), os.path.basename(f))
    return out


def checkpoint_arrays_f32(model_dir):
    out = {}
    for f in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with safe_open(f, "pt") as sf:
            for k in sf.keys():
                out[k] = sf.get_tensor(k).float().numpy()
    return out


def describe_graph(m):
    print("  graph inputs:")
    for i in m.graph.input:
        dims = [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
        print(f"    {i.name} {onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)} {dims}")
    for i in m.graph.initializer:
        print(f"  initializer with data: {i.name} {list(i.dims)}")
    for o in m.graph.output:
        dims = [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
        print(f"  output: {o.name} {onnx.helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type)} {dims}")


def describe_checkpoint(model_dir):
    files = sorted(os.listdir(model_dir))
    print(f"  {os.path.relpath(model_dir, REPO)}: files {files}")
    for k, (dt, shape, f) in checkpoint_tensors(model_dir).items():
        print(f"    {k} {dt} {shape}  ({f})")


def check_with_onnxruntime(onnx_path, model_dir, ref, what):
    """Feeds the checkpoint's tensors (cast to fp32) as the graph's data-less inputs, by name
    without the `m.` prefix, and compares the logits with the PyTorch reference."""
    try:
        import onnxruntime as ort
    except ImportError:
        print(f"  onnxruntime not installed: {what} not checked against the graph")
        return
    weights = checkpoint_arrays_f32(model_dir)
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    feeds = {"input_ids": IDS.numpy()}
    for i in sess.get_inputs():
        if i.name != "input_ids":
            assert i.name.startswith("m."), i.name
            feeds[i.name] = weights[i.name[len("m."):]]
    unused = sorted(set(weights) - {n[len("m."):] for n in feeds})
    assert not unused, f"checkpoint tensors the graph does not read: {unused}"
    got = sess.run(["logits"], feeds)[0]
    ref = ref.numpy()
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    print(f"  onnxruntime {ort.__version__}: {os.path.relpath(onnx_path, REPO)} + {os.path.relpath(model_dir, REPO)} "
          f"vs {what}: max |diff| / max |ref| = {err:.2e}")
    assert err < 1e-5, err


def main():
    global IDS
    print(f"torch {torch.__version__}, transformers {tf.__version__}, onnx {onnx.__version__}, "
          f"safetensors {safetensors.__version__}, numpy {np.__version__}")
    g = torch.Generator().manual_seed(1)
    IDS = torch.randint(0, 256, (B, T), generator=g)
    tgt = torch.randint(0, 256, (B, T), generator=g)

    # --- llama: untied head; fp32 single file, bf16 in shards ---------------------------------
    d = os.path.join(HERE, "llama")
    clean(d)
    model = build(llama_config(tie=False))
    model.save_pretrained(f"{d}/f32")
    model.to(torch.bfloat16).save_pretrained(f"{d}/bf16_sharded", max_shard_size=BF16_SHARD)
    del model
    shards = sorted(glob.glob(f"{d}/bf16_sharded/*.safetensors"))
    assert 2 <= len(shards) <= 3 and os.path.exists(f"{d}/bf16_sharded/model.safetensors.index.json"), shards
    assert os.listdir(f"{d}/f32") and os.path.exists(f"{d}/f32/model.safetensors")
    print("llama")
    m = export_shapes_only(f"{d}/f32", f"{d}/model.onnx")
    save_pb(IDS, f"{d}/ref/input_ids.pb", "input_ids")
    save_pb(tgt, f"{d}/ref/targets.pb", "targets")
    lf = logits_of(f"{d}/f32", torch.float32)
    lb = logits_of(f"{d}/bf16_sharded", torch.bfloat16)
    loss = torch.nn.functional.cross_entropy(lf.reshape(-1, lf.shape[-1]), tgt.reshape(-1))
    save_pb(lf, f"{d}/ref/logits_f32.pb", "logits")
    save_pb(lb, f"{d}/ref/logits_bf16.pb", "logits")
    save_pb(loss, f"{d}/ref/loss_f32.pb", "loss")
    print(f"  loss_f32 {loss.item():.6f}; |logits_bf16 - logits_f32| max {float((lb - lf).abs().max()):.3e}")
    describe_graph(m)
    describe_checkpoint(f"{d}/f32")
    describe_checkpoint(f"{d}/bf16_sharded")
    index = json.load(open(f"{d}/bf16_sharded/model.safetensors.index.json"))
    print(f"  shards: {sorted(set(index['weight_map'].values()))}")
    check_with_onnxruntime(f"{d}/model.onnx", f"{d}/f32", lf, "logits_f32")
    check_with_onnxruntime(f"{d}/model.onnx", f"{d}/bf16_sharded", lb, "logits_bf16")

    # --- tied: the same Llama with tie_word_embeddings=True --------------------------------------
    d = os.path.join(HERE, "tied")
    clean(d)
    model = build(llama_config(tie=True))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(f"{d}/f32")
    del model
    keys = sorted(checkpoint_tensors(f"{d}/f32"))
    print(f"tied\n  safetensors keys: {keys}")
    assert "model.embed_tokens.weight" in keys and "lm_head.weight" not in keys, keys
    m = export_shapes_only(f"{d}/f32", f"{d}/model.onnx")
    save_pb(IDS, f"{d}/ref/input_ids.pb", "input_ids")
    save_pb(tgt, f"{d}/ref/targets.pb", "targets")
    lf = logits_of(f"{d}/f32", torch.float32)
    loss = torch.nn.functional.cross_entropy(lf.reshape(-1, lf.shape[-1]), tgt.reshape(-1))
    save_pb(lf, f"{d}/ref/logits_f32.pb", "logits")
    save_pb(loss, f"{d}/ref/loss_f32.pb", "loss")
    print(f"  loss_f32 {loss.item():.6f}")
    describe_graph(m)
    describe_checkpoint(f"{d}/f32")
    readers = [f"{n.op_type}" for n in m.graph.node if "m.model.embed_tokens.weight" in n.input]
    print(f"  nodes reading m.model.embed_tokens.weight: {readers}")
    check_with_onnxruntime(f"{d}/model.onnx", f"{d}/f32", lf, "logits_f32")

    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(HERE) for f in fs)
    print(f"test/data/hf_tiny: {total:,} bytes")


if __name__ == "__main__":
    main()
