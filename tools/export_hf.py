"""Exports a local Hugging Face causal LM directory WITH its weights to ONNX, for megac to train.

Usage: tools/export_hf.py MODEL_DIR OUT.onnx [--optimize] [--attn sdpa|eager] [--dtype float32]
                         [--external-data] [--keep-metadata]

MODEL_DIR is what save_pretrained writes (config.json plus model.safetensors, or shards and
model.safetensors.index.json). The model is loaded in float32 whatever dtype the checkpoint holds
(megac trains fp32 master weights), wrapped so that the graph's one input is `input_ids` int64
[batch, seq] and its one output `logits` float32 [batch, seq, vocab] (both axes dynamic; no KV
cache), and exported with torch.onnx.export(dynamo=True). Every weight is an initializer; a
model too large for one protobuf (2 GB; the exporter switches past 1.5 GiB of initializers, or
always with --external-data) keeps them in external data, OUT.onnx.data beside OUT.onnx (keep
the two together).

Default (optimize=False): the initializers keep the PyTorch names with the wrapper's prefix `m.`
(`m.model.layers.0.self_attn.q_proj.weight`) and Hugging Face's layouts (Linear weights [out, in]),
so they match the checkpoint's tensors by name, drop the `m.`. A tied head
(tie_word_embeddings=True) is one initializer, `m.model.embed_tokens.weight`, read by the
embedding and the head, as the checkpoint stores it (the exporter would call it `m.lm_head.weight`;
this tool renames it). Buffers the checkpoint does not hold (the rotary `inv_freq`) are
initializers too.

--optimize runs the exporter's optimizer, what a plain torch.onnx.export gives users: it folds each
Linear weight's transpose into a new initializer named `val_N` ([in, out]) and merges initializers
with equal contents. megac can still train such a file, but it cannot match its weights to a
checkpoint by name (to load or save Hugging Face weights, keep the default).

To export a model of any size WITHOUT its weights (the meta device, nothing allocated), use
tools/export_shapes_only.py. Needs torch, transformers and onnx (not part of tools/setup.sh).
"""
import argparse
import os
import sys
import time

import onnx
import torch
import transformers as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_shapes_only import (Logits, canonical_param_names, rename_tied,  # noqa: E402
                                scrub_node_metadata, tied_groups)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_model(model_dir, attn, dtype):
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise SystemExit(f"{model_dir}: not a local Hugging Face model directory (no config.json)")
    model = tf.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation=attn)
    return Logits(model).eval()


def export(model, out, optimize, external_data):
    ids = torch.zeros(2, 16, dtype=torch.long)  # batch >= 2, or the batch dim is specialized to 1
    dims = {0: torch.export.Dim("batch", max=1024), 1: torch.export.Dim("seq", max=1 << 20)}
    with torch.no_grad():
        prog = torch.onnx.export(model, (ids,), dynamo=True, optimize=optimize, input_names=["input_ids"],
                                 output_names=["logits"], dynamic_shapes=(dims,))
    # None: the exporter writes OUT.onnx.data by itself past 1.5 GiB of initializers
    prog.save(out, external_data=True if external_data else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", metavar="MODEL_DIR")
    ap.add_argument("out", metavar="OUT.onnx")
    ap.add_argument("--optimize", action="store_true",
                    help="run the exporter's optimizer: weights renamed val_N and Linear weights transposed "
                         "(megac trains it, but cannot match it to a checkpoint by name)")
    ap.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa", help="attention implementation (default sdpa)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                    help="dtype the weights are loaded and exported in (default float32: megac trains fp32 masters)")
    ap.add_argument("--external-data", action="store_true",
                    help="weights in OUT.onnx.data whatever the size (default: only past 1.5 GiB)")
    ap.add_argument("--keep-metadata", action="store_true",
                    help="keep the exporter's per-node scope metadata (stack traces are always dropped)")
    args = ap.parse_args()

    t0 = time.time()
    model = load_model(args.model_dir, args.attn, DTYPES[args.dtype])
    params = dict(model.named_parameters())
    tied = tied_groups(model)
    n_bytes = sum(p.numel() * p.element_size() for p in params.values())
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    data = args.out + ".data"
    if os.path.exists(data):
        os.remove(data)  # a stale one would be appended to, or left beside a file that no longer reads it
    export(model, args.out, args.optimize, args.external_data)
    t_export = time.time() - t0

    m = onnx.load(args.out, load_external_data=False)
    rename_tied(m, tied)
    scrub_node_metadata(m, args.keep_metadata)
    inits = {i.name for i in m.graph.initializer}
    if not args.optimize:
        missing = [n for n in canonical_param_names(params, tied) if n not in inits]
        if missing:
            raise SystemExit(f"parameters that are not named initializers in {args.out}: {missing}")
    onnx.save(m, args.out)  # external data references are kept as they are
    external = os.path.exists(data)
    onnx.checker.check_model(args.out)  # by path: reads external data where there is some

    n_params = sum(p.numel() for p in params.values())
    tied_s = "; tied: " + ", ".join(" = ".join(g) for g in tied) if tied else ""
    print(f"{args.out}: {args.model_dir} ({model.m.config.model_type}, {args.attn}, {args.dtype}, "
          f"optimize={args.optimize}), {n_params:,} parameters ({n_bytes / 2**20:,.1f} MiB){tied_s}; "
          f"{len(m.graph.node)} nodes, {len(inits)} initializers"
          f"{', weights in ' + os.path.basename(data) if external else ''}; "
          f"{os.path.getsize(args.out):,} bytes; export {t_export:.0f} s, total {time.time() - t0:.0f} s "
          f"(torch {torch.__version__}, transformers {tf.__version__}, onnx {onnx.__version__})")


if __name__ == "__main__":
    main()
