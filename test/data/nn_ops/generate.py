#!/usr/bin/env python3
"""Writes the small ONNX node tests in this folder (ONNX test-data layout:
CASE/model.onnx, CASE/test_data_set_0/input_N.pb, output_N.pb) for
LayerNormalization, RMSNormalization, RotaryEmbedding and Attention cases the
upstream backend tests do not cover. Expected outputs come from onnx's
reference implementation (onnx.reference.ReferenceEvaluator).

    python3 test/data/nn_ops/generate.py [OUT_DIR]   # default: this folder
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

OPSET = 23
NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.bool_: TensorProto.BOOL}


def write_case(out_dir, name, op, inputs, n_outputs, **attrs):
    """inputs: list of (name, array) with None for an omitted optional input."""
    in_names = [n if a is not None else "" for n, a in inputs]
    out_names = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, in_names, out_names, **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype.type], a.shape)
                    for n, a in inputs if a is not None]
    graph_outputs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in out_names]
    model = helper.make_model(helper.make_graph([node], name, graph_inputs, graph_outputs),
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 10
    feeds = {n: a for n, a in inputs if a is not None}
    outs = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(o, NP_TO_ONNX[a.dtype.type], a.shape)
                              for o, a in zip(out_names, outs))
    onnx.checker.check_model(model)
    case = os.path.join(out_dir, name)
    data = os.path.join(case, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(case, "model.onnx"))
    for i, (n, a) in enumerate((n, a) for n, a in inputs if a is not None):
        onnx.save_tensor(numpy_helper.from_array(a, n), os.path.join(data, f"input_{i}.pb"))
    for i, o in enumerate(outs):
        onnx.save_tensor(numpy_helper.from_array(o, out_names[i]), os.path.join(data, f"output_{i}.pb"))


def rnd(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rng = np.random.default_rng(23)

    # Scale (3,1) and B (4,) broadcast to X (2,3,4) from different ends.
    write_case(out_dir, "layernorm_axis1_broadcast_params", "LayerNormalization",
               [("X", rnd(rng, 2, 3, 4)), ("Scale", rnd(rng, 3, 1)), ("B", rnd(rng, 4))], 3,
               axis=1, epsilon=1e-3)
    write_case(out_dir, "rmsnorm_axis_negative_2", "RMSNormalization",
               [("X", rnd(rng, 2, 3, 4)), ("scale", rnd(rng, 3, 4))], 1, axis=-2, epsilon=1e-3)

    # The torch exporter's form: per-token caches of batch 1 for a batch-2 input.
    angles = rng.uniform(0, 3, (1, 3, 2)).astype(np.float32)
    write_case(out_dir, "rotary_4d_cache_batch_broadcast", "RotaryEmbedding",
               [("X", rnd(rng, 2, 2, 3, 4)), ("cos", np.cos(angles)), ("sin", np.sin(angles))], 1)
    table = rng.uniform(0, 3, (10, 2)).astype(np.float32)
    write_case(out_dir, "rotary_3d_partial_interleaved_position_ids", "RotaryEmbedding",
               [("X", rnd(rng, 2, 3, 16)), ("cos", np.cos(table)), ("sin", np.sin(table)),
                ("position_ids", np.array([[0, 4, 9], [3, 3, 1]], dtype=np.int64))], 1,
               num_heads=2, rotary_embedding_dim=4, interleaved=1)

    # 3-D GQA (4 q heads, 2 kv heads), causal (top-left, no cache) plus a float mask.
    write_case(out_dir, "attention_3d_gqa_causal_float_mask", "Attention",
               [("Q", rnd(rng, 2, 3, 16)), ("K", rnd(rng, 2, 5, 8)), ("V", rnd(rng, 2, 5, 12)),
                ("attn_mask", rnd(rng, 3, 5))], 1, q_num_heads=4, kv_num_heads=2, is_causal=1)
    # 4-D with a past cache (offset causal), a bool mask with one fully-masked row,
    # softcap, and the mode-2 qk output (softcapped scores + bias).
    mask = rng.uniform(size=(2, 1, 3, 5)) > 0.3
    mask[1, 0, 2, :] = False
    write_case(out_dir, "attention_4d_past_bool_mask_softcap", "Attention",
               [("Q", rnd(rng, 2, 4, 3, 4)), ("K", rnd(rng, 2, 2, 3, 4)), ("V", rnd(rng, 2, 2, 3, 5)),
                ("attn_mask", mask), ("past_key", rnd(rng, 2, 2, 2, 4)), ("past_value", rnd(rng, 2, 2, 2, 5))],
               4, is_causal=1, softcap=2.0, qk_matmul_output_mode=2)
    # Explicit scale, mode-3 qk output (the probabilities), a mask shorter than
    # the key length (padded with -inf).
    write_case(out_dir, "attention_4d_scale_short_mask_probs", "Attention",
               [("Q", rnd(rng, 1, 2, 3, 4)), ("K", rnd(rng, 1, 2, 6, 4)), ("V", rnd(rng, 1, 2, 6, 4)),
                ("attn_mask", rnd(rng, 3, 4)), ("past_key", None), ("past_value", None)],
               4, scale=0.3, qk_matmul_output_mode=3)


if __name__ == "__main__":
    main()
