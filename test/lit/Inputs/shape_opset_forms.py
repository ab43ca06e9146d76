#!/usr/bin/env python3
"""Runs shape-family ops in the forms older (and the newest) opsets write them
through `megac forward` and compares with onnx's reference evaluator.

    shape_opset_forms.py MEGAC WORKDIR

Each case is one node in a model of its opset. Its first input is fed at run
time, the others are initializers (megac needs shapes, axes, pads... at
compile time); `dummy` cases feed an unused input and keep every input
constant. Prints "PASS name" or "FAIL name: why" per case.
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

MEGAC, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
rng = np.random.default_rng(0)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def i64(*v):
    return np.array(v, dtype=np.int64)


def scatter_axis0(x, idx, upd):
    out = x.copy()
    for j in range(idx.shape[1]):
        out[idx[0, j], j] = upd[0, j]
    return [out]


# name, opset, op, [(input name, array)], attrs, number of outputs, all inputs
# constant[, expected outputs from the inputs where the reference cannot]
CASES = [
    ("squeeze_axes_attr_op11", 11, "Squeeze", [("x", f32(3, 1, 4, 1))], {"axes": [1, -1]}, 1, False),
    ("squeeze_no_axes_op11", 11, "Squeeze", [("x", f32(1, 3, 1))], {}, 1, False),
    ("squeeze_axes_input_op13", 13, "Squeeze", [("x", f32(3, 1, 4)), ("axes", i64(-2))], {}, 1, False),
    ("unsqueeze_axes_attr_op9", 9, "Unsqueeze", [("x", f32(3, 4))], {"axes": [0, 3]}, 1, False),
    ("unsqueeze_neg_axes_attr_op11", 11, "Unsqueeze", [("x", f32(3, 4))], {"axes": [-1, 0]}, 1, False),
    ("split_attr_op11", 11, "Split", [("x", f32(2, 5))], {"axis": 1, "split": [2, 3]}, 2, False),
    ("split_equal_op11", 11, "Split", [("x", f32(6, 2))], {}, 3, False),
    ("split_neg_axis_op13", 13, "Split", [("x", f32(2, 6)), ("split", i64(1, 5))], {"axis": -1}, 2, False),
    ("split_num_outputs_uneven_op18", 18, "Split", [("x", f32(7, 3))], {"num_outputs": 3}, 3, False),
    ("slice_attrs_op9", 9, "Slice", [("x", f32(4, 5))], {"starts": [1, 0], "ends": [3, -1], "axes": [0, 1]}, 1, False),
    ("slice_attrs_no_axes_op9", 9, "Slice", [("x", f32(4, 5))], {"starts": [-3], "ends": [1000]}, 1, False),
    ("slice_neg_steps_op13", 13, "Slice",
     [("x", f32(5, 6)), ("starts", i64(-1, 4)), ("ends", i64(-1000, 0)), ("axes", i64(1, 0)), ("steps", i64(-2, -1))],
     {}, 1, False),
    ("pad_attrs_op2", 2, "Pad", [("x", f32(2, 3))], {"pads": [1, 0, 2, 1], "value": 1.5}, 1, False),
    ("pad_reflect_op10", 10, "Pad", [("x", f32(3, 4))], {"pads": [2, 1, 1, 3], "mode": "reflect"}, 1, False),
    ("pad_edge_op10", 10, "Pad", [("x", f32(3, 4))], {"pads": [0, 2, 1, 0], "mode": "edge"}, 1, False),
    # numpy.pad (the reference) rejects negative pads, which crop: expected by hand.
    ("pad_negative_op11", 11, "Pad", [("x", f32(3, 4)), ("pads", i64(-1, 1, 0, -2)), ("v", np.float32(7))],
     {}, 1, False, lambda x, pads, v: [np.concatenate([np.full((2, 1), v, np.float32), x[1:, :2]], axis=1)]),
    ("pad_axes_op18", 18, "Pad", [("x", f32(2, 3, 4)), ("pads", i64(1, 2, 0, 1)), ("v", np.float32(-1)),
                                  ("axes", i64(-1, 0))], {}, 1, False),
    ("pad_wrap_op19", 19, "Pad", [("x", f32(3, 4)), ("pads", i64(1, 5, 2, 1))], {"mode": "wrap"}, 1, False),
    # The reference evaluator lacks the deprecated Scatter.
    ("scatter_op9", 9, "Scatter", [("x", f32(3, 4)), ("i", i64(1, 0, 2, 2).reshape(1, 4)),
                                   ("u", f32(1, 4))], {"axis": 0}, 1, False, scatter_axis0),
    ("scatter_elements_add_op16", 16, "ScatterElements",
     [("x", f32(3, 4)), ("i", i64(1, 1, -1, 0).reshape(2, 2)), ("u", f32(2, 2))],
     {"axis": 1, "reduction": "add"}, 1, False),
    ("scatternd_op11", 11, "ScatterND", [("x", f32(4, 3)), ("i", i64(2, 0).reshape(2, 1)), ("u", f32(2, 3))],
     {}, 1, False),
    ("scatternd_max_op18", 18, "ScatterND", [("x", f32(4, 3)), ("i", i64(1, 2, -1, 0).reshape(2, 2)),
                                             ("u", f32(2))], {"reduction": "max"}, 1, False),
    ("gather_axis1_op9", 9, "Gather", [("x", f32(3, 5)), ("i", i64(4, 0, 2, 2).reshape(2, 2))], {"axis": 1}, 1,
     False),
    ("gather_scalar_index_op13", 13, "Gather", [("x", f32(3, 5)), ("i", np.array(-1, np.int32))], {"axis": 0}, 1,
     False),
    ("gather_elements_op11", 11, "GatherElements", [("x", f32(3, 4)), ("i", i64(0, -1, 2, 1, 0, 0).reshape(3, 2))],
     {"axis": 1}, 1, False),
    ("gathernd_op11", 11, "GatherND", [("x", f32(2, 3, 4)), ("i", i64(1, 2, 0, -1).reshape(2, 2))], {}, 1, False),
    ("gathernd_batch_op12", 12, "GatherND", [("x", f32(2, 3, 4)), ("i", i64(2, 0, 1, 1).reshape(2, 2, 1))],
     {"batch_dims": 1}, 1, False),
    ("flatten_axis0_op9", 9, "Flatten", [("x", f32(2, 3, 4))], {"axis": 0}, 1, False),
    ("flatten_neg_axis_op13", 13, "Flatten", [("x", f32(2, 3, 4))], {"axis": -1}, 1, False),
    ("concat_op7", 7, "Concat", [("a", f32(2, 1, 3)), ("b", f32(2, 4, 3)), ("c", f32(2, 0, 3))], {"axis": 1}, 1,
     False),
    ("reshape_zero_minus_one_op7", 7, "Reshape", [("x", f32(2, 3, 4)), ("s", i64(0, -1))], {}, 1, False),
    ("reshape_allowzero_op14", 14, "Reshape", [("x", f32(0, 3)), ("s", i64(3, 0))], {"allowzero": 1}, 1, False),
    ("transpose_op7", 7, "Transpose", [("x", f32(2, 3, 4))], {"perm": [1, 2, 0]}, 1, False),
    ("transpose_default_op13", 13, "Transpose", [("x", f32(2, 3, 4))], {}, 1, False),
    ("tile_op7", 7, "Tile", [("x", f32(2, 3)), ("r", i64(3, 2))], {}, 1, False),
    ("expand_op8", 8, "Expand", [("x", f32(3, 1)), ("s", i64(2, 1, 4))], {}, 1, False),
    ("onehot_op9", 9, "OneHot", [("i", i64(0, 2, 1)), ("d", np.array(3, np.float32)),
                                 ("v", np.array([0, 5], np.float32))], {}, 1, False),
    ("onehot_neg_op11", 11, "OneHot", [("i", i64(-1, 4, 1, -4).reshape(2, 2)), ("d", np.array(4, np.int64)),
                                       ("v", np.array([-1, 1], np.int32))], {"axis": -2}, 1, False),
    ("shape_op7", 7, "Shape", [("x", f32(2, 3, 4))], {}, 1, False),
    ("shape_start_end_op15", 15, "Shape", [("x", f32(2, 3, 4, 5))], {"start": -3, "end": -1}, 1, False),
    ("size_op7", 7, "Size", [("x", f32(2, 3, 4))], {}, 1, False),
    ("constantofshape_op9", 9, "ConstantOfShape", [("s", i64(2, 3))],
     {"value": numpy_helper.from_array(np.array([7], np.int64))}, 1, True),
    ("constantofshape_default_op20", 20, "ConstantOfShape", [("s", i64(4))], {}, 1, True),
    ("range_int_op11", 11, "Range", [("a", np.array(10, np.int64)), ("b", np.array(-3, np.int64)),
                                     ("d", np.array(-4, np.int64))], {}, 1, True),
    ("range_float_op11", 11, "Range", [("a", np.float32(0.5)), ("b", np.float32(2.0)), ("d", np.float32(0.3))],
     {}, 1, True),
    ("cumsum_exclusive_reverse_op11", 11, "CumSum", [("x", f32(3, 4)), ("a", np.array(-1, np.int32))],
     {"exclusive": 1, "reverse": 1}, 1, False),
    ("cumsum_int_op14", 14, "CumSum", [("x", np.arange(12, dtype=np.int64).reshape(3, 4)), ("a", i64(0)[0])],
     {}, 1, False),
    ("trilu_lower_k_op14", 14, "Trilu", [("x", f32(2, 3, 5)), ("k", np.array(1, np.int64))], {"upper": 0}, 1,
     False),
    ("trilu_upper_neg_k_op14", 14, "Trilu", [("x", f32(4, 3)), ("k", np.array(-1, np.int64))], {}, 1, False),
]


def tensor_type(arr):
    return helper.np_dtype_to_tensor_dtype(arr.dtype)


def build(case):
    name, opset, op, inputs, attrs, n_out, all_const = case[:7]
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, [n for n, _ in inputs], outs, **attrs)
    feed_name, feed = inputs[0]
    consts = inputs[1:]
    if all_const:
        feed_name, feed = "dummy", np.zeros([1], np.float32)
        consts = inputs
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info(feed_name, tensor_type(feed), list(feed.shape))],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return model, feed_name, feed


def run_case(case):
    name, _, _, inputs, _, n_out, _ = case[:7]
    model, feed_name, feed = build(case)
    if len(case) > 7:
        want = case[7](*[a for _, a in inputs])
    else:
        want = ReferenceEvaluator(model).run(None, {feed_name: feed})
    feed_path = os.path.join(WORK, name + ".in.pb")
    onnx.save_tensor(numpy_helper.from_array(feed, feed_name), feed_path)
    for k in range(n_out):
        # megac forward writes the first graph output: one model per output.
        single = onnx.ModelProto()
        single.CopyFrom(model)
        del single.graph.output[:]
        single.graph.output.append(model.graph.output[k])
        model_path = os.path.join(WORK, f"{name}.{k}.onnx")
        onnx.save(single, model_path)
        out_path = os.path.join(WORK, f"{name}.{k}.out.pb")
        r = subprocess.run([MEGAC, "forward", model_path, "--input", feed_path, "-o", out_path],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
        got = numpy_helper.to_array(onnx.load_tensor(out_path))
        exp = np.asarray(want[k])
        if got.shape != exp.shape or got.dtype != exp.dtype:
            return f"output {k} is {got.dtype}{list(got.shape)}, expected {exp.dtype}{list(exp.shape)}"
        if not np.allclose(got, exp, rtol=1e-6, atol=1e-6):
            return f"output {k} differs: got {got.ravel()[:8]}, expected {exp.ravel()[:8]}"
    return None


for case in CASES:
    err = run_case(case)
    print(f"PASS {case[0]}" if err is None else f"FAIL {case[0]}: {err}")
print(f"done: {len(CASES)} cases")
