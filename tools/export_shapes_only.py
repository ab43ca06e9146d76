"""Exports a Hugging Face causal LM's graph WITHOUT its weights, whatever the model's size: every
parameter becomes a graph input that has a name, a dtype and a shape but no data, so the file
stays small (a few MB for a 405B model) and nothing is ever allocated. megac can compile and
plan such a file, and train it with `--init` (megac draws the weights) or with weights it loads
from a checkpoint by name.

Usage:
  tools/export_shapes_only.py MODEL_DIR OUT.onnx          a local Hugging Face model directory
                                                          (config.json inside; no weights read)
  tools/export_shapes_only.py path/to/config.json OUT.onnx
  tools/export_shapes_only.py --preset bench2.8b OUT.onnx a named benchmark shape (list: --help)
options:
  --layers N             override the layer count (a quick, small file)
  --attn sdpa|eager      the attention implementation exported (default sdpa, the users' default)
  --keep-metadata        keep the exporter's per-node scope metadata (stack traces always dropped)

What the file holds:
  - input `input_ids` int64 [batch, seq] (both dynamic); output `logits` float32 [batch, seq, vocab];
  - one data-less float32 graph input per parameter, named as PyTorch names it with the wrapper's
    prefix `m.` (`m.model.layers.0.self_attn.q_proj.weight`); Linear weights keep Hugging Face's
    [out, in] layout, so a checkpoint's tensors match the inputs by name (drop the `m.`) and shape;
  - tied embeddings (tie_word_embeddings=True): one input, `m.model.embed_tokens.weight`, read by
    both the embedding Gather and the head's MatMul; there is no `m.lm_head.weight`, as there is
    none in the checkpoint;
  - every buffer (the rotary `inv_freq`, rope scaling included) as an initializer WITH its values,
    computed on the CPU from the config: checkpoints never hold these non-persistent buffers and
    megac needs them to fold the rotary tables.

The recipe (checked with torch 2.11/transformers 5.17 on the GPU machine and torch 2.15/
transformers 5.25 on the CPU): the model is built on the meta device (no memory) in float32,
exported with the dynamo exporter and optimize=False (optimize=True fails on meta tensors, and it
would rename the weights `val_N` and transpose the Linear ones), saved with
include_initializers=False and keep_initializers_as_inputs=True (without the latter the weights
lose their shapes), from an example batch of 2 (a batch of 1 specializes the batch dim to 1).

Presets use the public models' dimensions; their rotary parameters are the public configs'
(Llama-3.1: theta 500000 with the "llama3" frequency scaling; Qwen2.5: theta 1e6); bench2.8b keeps
transformers' default rope, like the PyTorch peer (bench/peer_pytorch.py) it is compared with.
Presets always have an untied head (tie_word_embeddings=False).

Needs torch, transformers and onnx (not part of tools/setup.sh; CI does not run this).
To export a model WITH its weights, use tools/export_hf.py.
"""
import argparse
import os
import sys
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
    """The graph's one output is the logits; the loss is megac's (append-loss). The attribute
    name `m` is the `m.` prefix of every weight's name in the graph."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


def preset_config(name, layers=None):
    spec = dict(PRESETS[name])
    cls = spec.pop("cls")
    if layers:
        spec["num_hidden_layers"] = layers
    return cls(tie_word_embeddings=False, **spec)


def load_config(source, layers=None):
    """A local Hugging Face model directory (config.json inside) or a config.json file."""
    if os.path.isdir(source) and not os.path.isfile(os.path.join(source, "config.json")):
        raise SystemExit(f"{source}: no config.json in this directory")
    if not os.path.exists(source):
        raise SystemExit(f"{source}: no such directory or file (give a local Hugging Face model "
                         f"directory, a config.json, or --preset NAME)")
    cfg = tf.AutoConfig.from_pretrained(source)
    if layers:
        cfg.num_hidden_layers = layers
        lt = getattr(cfg, "layer_types", None)  # per-layer attention kinds, one per layer
        if lt:
            cfg.layer_types = [lt[i % len(lt)] for i in range(layers)]
    return cfg


def build_meta_model(cfg, attn):
    cfg._attn_implementation = attn
    with torch.device("meta"):
        # float32 whatever the config's dtype: megac trains fp32 master weights
        return Logits(tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)).eval()


def real_buffer_values(meta_model, cfg):
    """Every buffer of the meta model, computed for real on the CPU: the buffer's owning module
    is rebuilt from the config (for rotary embeddings that is exactly how transformers derives
    inv_freq, rope scaling included), and its buffer read back. Names carry the `m.` prefix."""
    values = {}
    rebuilt = {}
    for full_name, buf in meta_model.named_buffers():
        owner_path, _, leaf = full_name.rpartition(".")
        if owner_path not in rebuilt:
            owner = meta_model.get_submodule(owner_path)
            try:
                with torch.device("cpu"):
                    rebuilt[owner_path] = type(owner)(cfg)
            except Exception as e:
                raise SystemExit(f"cannot compute buffer {full_name}: rebuilding {type(owner).__name__}"
                                 f"(config) on the CPU failed: {e!r}")
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


def tied_groups(model):
    """Each parameter that more than one module holds (tie_word_embeddings): [[kept, alias...]],
    names with the `m.` prefix. `kept` is the name the checkpoint stores (save_pretrained drops the
    keys of the model's _tied_weights_keys, e.g. lm_head.weight), which is also the name
    named_parameters() keeps; the aliases are absent from the checkpoint."""
    tied_keys = getattr(model.m, "_tied_weights_keys", None) or {}
    by_id = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    groups = []
    for names in by_id.values():
        if len(names) > 1:
            sources = [n for n in names if n[len("m."):] not in tied_keys]
            kept = sources[0] if len(sources) == 1 else names[0]
            groups.append([kept] + [n for n in names if n != kept])
    return groups


def rename_tied(m, groups):
    """The exporter names a tied weight after its LAST holder (`m.lm_head.weight`), one graph input
    or initializer read by the embedding's Gather and the head's MatMul alike. Renames it to the
    name the checkpoint stores (`m.model.embed_tokens.weight`) so that weights match by name."""
    renamed = {}
    for kept, *aliases in groups:
        for a in aliases:
            renamed[a] = kept
    if not renamed:
        return []
    done = []
    for coll in (m.graph.input, m.graph.initializer):
        for v in coll:
            if v.name in renamed:
                if any(w.name == renamed[v.name] for w in coll):
                    raise SystemExit(f"tied weight {v.name}: the graph also has {renamed[v.name]}")
                done.append((v.name, renamed[v.name]))
                v.name = renamed[v.name]
    for n in m.graph.node:
        for k, name in enumerate(n.input):
            if name in renamed:
                n.input[k] = renamed[name]
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
            raise SystemExit(f"node {n.name} ({n.op_type}) has a subgraph: tied-weight renaming does not reach it")
    return done


def canonical_param_names(params, tied):
    """The parameters' names as the graph has them after rename_tied: each tied group once, under
    the checkpoint's name."""
    aliases = {a for g in tied for a in g}
    return [n for n in params if n not in aliases] + [g[0] for g in tied]


def export_shapes_only(cfg, out, attn="sdpa", keep_metadata=False):
    """Exports cfg's causal LM to `out` without weights; returns a dict describing the file."""
    t0 = time.time()
    model = build_meta_model(cfg, attn)
    params = dict(model.named_parameters())  # tied parameters once, under the first name
    buffers = real_buffer_values(model, cfg)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    export_graph(model, out)
    t_export = time.time() - t0

    m = onnx.load(out)
    given = give_buffers_data(m, buffers)
    tied = tied_groups(model)
    rename_tied(m, tied)
    scrub_node_metadata(m, keep_metadata)
    names = canonical_param_names(params, tied)
    unknown = [i.name for i in m.graph.input if i.name != "input_ids" and i.name not in names]
    if unknown:  # a data-less input that is neither a weight nor a buffer we filled: megac could not train it
        raise SystemExit(f"graph inputs that are neither parameters nor buffers: {unknown}")
    missing = [n for n in names if n not in {i.name for i in m.graph.input}]
    if missing:
        raise SystemExit(f"parameters the graph does not take as inputs: {missing}")
    onnx.save(m, out)
    return dict(model=model, params=params, given=given, tied=tied, nodes=len(m.graph.node),
                weights=len(m.graph.input) - 1, t_export=t_export, t_total=time.time() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 usage="%(prog)s (MODEL_DIR | CONFIG.json | --preset NAME) OUT.onnx "
                                       "[--layers N] [--attn sdpa|eager] [--keep-metadata]")
    ap.add_argument("paths", nargs="+", metavar="[MODEL_DIR | CONFIG.json] OUT.onnx")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="a named benchmark shape instead of a config")
    ap.add_argument("--layers", type=int, default=None, help="override the layer count (a quick, small file)")
    ap.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa",
                    help="attention implementation to export (default sdpa)")
    ap.add_argument("--keep-metadata", action="store_true",
                    help="keep the exporter's per-node scope metadata (stack traces are always dropped)")
    args = ap.parse_args()

    if args.preset:
        if len(args.paths) != 1:
            ap.error("with --preset, give only OUT.onnx")
        out = args.paths[0]
        what = args.preset
        cfg = preset_config(args.preset, args.layers)
    else:
        if len(args.paths) != 2:
            ap.error("give MODEL_DIR (or CONFIG.json) and OUT.onnx, or --preset NAME OUT.onnx")
        source, out = args.paths
        what = source
        cfg = load_config(source, args.layers)
    if not out.endswith(".onnx"):
        print(f"warning: {out} does not end in .onnx", file=sys.stderr)

    r = export_shapes_only(cfg, out, attn=args.attn, keep_metadata=args.keep_metadata)
    n_params = sum(p.numel() for p in r["params"].values())
    tied = "; tied: " + ", ".join(" = ".join(g) for g in r["tied"]) if r["tied"] else ""
    print(f"{out}: {what} ({cfg.model_type}, {args.attn}), {cfg.num_hidden_layers} layers, {n_params:,} parameters "
          f"({r['weights']} weights as data-less inputs{tied}), buffers with data: {', '.join(r['given']) or 'none'}; "
          f"{r['nodes']} nodes, {os.path.getsize(out):,} bytes; "
          f"export {r['t_export']:.0f} s, total {r['t_total']:.0f} s "
          f"(torch {torch.__version__}, transformers {tf.__version__}, onnx {onnx.__version__})")


if __name__ == "__main__":
    main()
