"""Exports a named transformer shape for megac's benchmarks and plans: the graph with every
weight as a data-less graph input (shape only, so the file stays small whatever the model's
size), and every non-parameter buffer (the rotary `inv_freq`) as an initializer WITH its real
values, computed on the CPU from the config. megac can then compile the file and train it with
`--init` (megac draws the weights), which a purely shapes-only file cannot: megac needs the
buffer's values to fold the rotary tables.

The export recipe (checked on the GPU machine, torch 2.11 + transformers 5.17): model built on the meta device, dynamo exporter with
optimize=False (optimize=True fails on meta tensors), saved with include_initializers=False and
keep_initializers_as_inputs=True (without the latter the weights lose their shapes), an example
batch of at least 2 (or the batch dim is specialized to 1), sdpa attention. Presets use the
public models' dimensions; the rotary parameters are the public configs' too (Llama-3.1: theta
500000 with the "llama3" frequency scaling; Qwen2.5: theta 1e6). bench2.8b keeps transformers'
default rope, like the PyTorch peer (bench/peer_pytorch.py) it is compared with.

Needs torch and transformers (not part of tools/setup.sh; CI does not run this).
Usage: export_bench_model.py OUT.onnx --model bench2.8b [--layers N]
"""
import argparse
import os
import time

import numpy as np
import onnx
import torch
import transformers as tf
from onnx import numpy_helper

LLAMA31_ROPE = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                    high_freq_factor=4.0, original_max_position_embeddings=8192)

PRESETS = {
    # the Llama-shaped 2.81B model of issue 5's first figure (and of the PyTorch peers)
    "bench2.8b": dict(cls=tf.LlamaConfig, vocab_size=32000, hidden_size=3072, intermediate_size=8192,
                      num_hidden_layers=26, num_attention_heads=24, num_key_value_heads=8,
                      max_position_embeddings=8192),
    "llama8b": dict(cls=tf.LlamaConfig, vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                    max_position_embeddings=131072, rope_parameters=LLAMA31_ROPE),
    "llama70b": dict(cls=tf.LlamaConfig, vocab_size=128256, hidden_size=8192, intermediate_size=28672,
                     num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                     max_position_embeddings=131072, rope_parameters=LLAMA31_ROPE),
    "qwen72b": dict(cls=tf.Qwen2Config, vocab_size=152064, hidden_size=8192, intermediate_size=29568,
                    num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                    max_position_embeddings=32768, rope_parameters=dict(rope_type="default", rope_theta=1e6)),
    # a dense ~120B Llama shape, the paper's headline size (not a public model: Llama-3.1 rope)
    "dense120b": dict(cls=tf.LlamaConfig, vocab_size=128256, hidden_size=10240, intermediate_size=28672,
                      num_hidden_layers=104, num_attention_heads=80, num_key_value_heads=8,
                      max_position_embeddings=131072, rope_parameters=LLAMA31_ROPE),
    "llama405b": dict(cls=tf.LlamaConfig, vocab_size=128256, hidden_size=16384, intermediate_size=53248,
                      num_hidden_layers=126, num_attention_heads=128, num_key_value_heads=8,
                      max_position_embeddings=131072, rope_parameters=LLAMA31_ROPE),
}


class Logits(torch.nn.Module):
    """The graph's one output is the logits; the loss is megac's (append-loss)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


def make_config(name, layers):
    spec = dict(PRESETS[name])
    cls = spec.pop("cls")
    if layers:
        spec["num_hidden_layers"] = layers
    cfg = cls(tie_word_embeddings=False, **spec)
    cfg._attn_implementation = "sdpa"
    return cfg


def real_buffer_values(meta_model, cfg):
    """Every buffer of the meta model, computed for real on the CPU: the buffer's owning module
    is rebuilt from the config (for rotary embeddings that is exactly how transformers derives
    inv_freq, rope scaling included), and its buffer read back."""
    values = {}
    rebuilt = {}
    for full_name, buf in meta_model.named_buffers():
        owner_path, _, leaf = full_name.rpartition(".")
        if owner_path not in rebuilt:
            owner = meta_model.get_submodule(owner_path)
            with torch.device("cpu"):
                rebuilt[owner_path] = type(owner)(cfg)
        real = dict(rebuilt[owner_path].named_buffers(recurse=False))[leaf]
        if tuple(real.shape) != tuple(buf.shape) or real.dtype != buf.dtype:
            raise SystemExit(f"rebuilt buffer {full_name} is {real.dtype}{list(real.shape)}, "
                             f"the model's is {buf.dtype}{list(buf.shape)}")
        values[full_name] = real.detach().numpy()
    return values


def export_graph(model, path):
    ids = torch.zeros(2, 16, dtype=torch.long, device="meta")  # batch >= 2, or batch is specialized to 1
    dims = {0: torch.export.Dim("batch", max=1024), 1: torch.export.Dim("seq", max=1 << 20)}
    prog = torch.onnx.export(model, (ids,), dynamo=True, optimize=False, input_names=["input_ids"],
                             output_names=["logits"], dynamic_shapes=(dims,))
    prog.save(path, include_initializers=False, keep_initializers_as_inputs=True)


def give_buffers_data(m, buffers):
    """Turns each buffer's data-less graph input into an initializer holding its values."""
    inputs = {i.name: i for i in m.graph.input}
    given = []
    for name, value in buffers.items():
        if name not in inputs:
            continue  # a buffer the graph does not read (e.g. original_inv_freq)
        declared = inputs[name].type.tensor_type
        shape = [d.dim_value for d in declared.shape.dim]
        if shape != list(value.shape) or declared.elem_type != onnx.helper.np_dtype_to_tensor_dtype(value.dtype):
            raise SystemExit(f"graph input {name} is {declared.elem_type}{shape}, its buffer {value.dtype}{list(value.shape)}")
        m.graph.input.remove(inputs[name])
        m.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        given.append(name)
    return given


def scrub_node_metadata(m, keep_scopes):
    """The exporter's per-node stack traces leak local paths; its other per-node metadata (module
    scopes, fx node names) is ~90% of a weightless file and megac reads none of it."""
    for n in m.graph.node:
        keep = [e for e in n.metadata_props if keep_scopes and e.key != "pkg.torch.onnx.stack_trace"]
        del n.metadata_props[:]
        n.metadata_props.extend(keep)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--model", choices=sorted(PRESETS), required=True)
    ap.add_argument("--layers", type=int, default=None, help="override the layer count (a quick, small file)")
    ap.add_argument("--keep-metadata", action="store_true",
                    help="keep the exporter's per-node scope metadata (stack traces are always dropped)")
    args = ap.parse_args()

    t0 = time.time()
    cfg = make_config(args.model, args.layers)
    with torch.device("meta"):
        model = Logits(tf.AutoModelForCausalLM.from_config(cfg)).eval()
    params = dict(model.named_parameters())
    buffers = real_buffer_values(model, cfg)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    export_graph(model, args.out)
    t_export = time.time() - t0

    m = onnx.load(args.out)
    given = give_buffers_data(m, buffers)
    scrub_node_metadata(m, args.keep_metadata)
    unknown = [i.name for i in m.graph.input if i.name != "input_ids" and i.name not in params]
    if unknown:  # a data-less input that is neither a weight nor a buffer we filled: megac could not train it
        raise SystemExit(f"graph inputs that are neither parameters nor buffers: {unknown}")
    onnx.save(m, args.out)

    n_params = sum(p.numel() for p in params.values())
    weights_as_inputs = len(m.graph.input) - 1
    print(f"{args.out}: {args.model}, {cfg.num_hidden_layers} layers, {n_params:,} parameters "
          f"({weights_as_inputs} weights as data-less inputs), buffers with data: {', '.join(given) or 'none'}; "
          f"{len(m.graph.node)} nodes, {os.path.getsize(args.out):,} bytes; "
          f"export {t_export:.0f} s, total {time.time() - t0:.0f} s "
          f"(torch {torch.__version__}, transformers {tf.__version__}, onnx {onnx.__version__})")


if __name__ == "__main__":
    main()
