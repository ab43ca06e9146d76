#!/usr/bin/env python3
"""Writes small ONNX node tests of older-opset elementwise forms that the
import hooks (frontend/import/ElementwiseImports.cpp) rewrite: Clip < 11 with
min/max attributes, opset < 7 broadcast/axis, Cast < 6 with a type name,
Dropout < 12 with a ratio attribute, opset 1 consumed_inputs. Layout as in
the ONNX backend tests: CASE/model.onnx, CASE/test_data_set_0/input_N.pb,
output_N.pb. Expected outputs are computed here with numpy.

    python3 test/data/elementwise_legacy/generate.py [OUT_DIR]   # default: this folder
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.int32): TensorProto.INT32, np.dtype(np.bool_): TensorProto.BOOL}


def write_case(out_dir, name, opset, nodes, inputs, outputs, initializers=()):
    """inputs / outputs: lists of (name, array); initializers: (name, array)."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], a.shape) for n, a in inputs],
        [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], a.shape) for n, a in outputs],
        [numpy_helper.from_array(a, n) for n, a in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3
    data = os.path.join(out_dir, name, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(out_dir, name, "model.onnx"))
    for i, (n, a) in enumerate(inputs):
        onnx.save_tensor(numpy_helper.from_array(a, n), os.path.join(data, f"input_{i}.pb"))
    for i, (n, a) in enumerate(outputs):
        onnx.save_tensor(numpy_helper.from_array(a, n), os.path.join(data, f"output_{i}.pb"))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rng = np.random.default_rng(0)

    x = rng.normal(size=(2, 3)).astype(np.float32) * 2
    write_case(out, "clip_opset6_attrs", 6, [helper.make_node("Clip", ["x"], ["y"], min=-1.0, max=1.5)],
               [("x", x)], [("y", np.clip(x, -1.0, 1.5))])

    x = np.array([-2.5, -0.1, 0.0, 0.7], dtype=np.float64)
    write_case(out, "clip_opset6_min_only_f64", 6, [helper.make_node("Clip", ["x"], ["y"], min=0.0)],
               [("x", x)], [("y", np.maximum(x, 0.0))])

    # Clip of an op result: its type is unknown at import, so the hook converts the bounds with CastLike.
    x = np.array([-3.0, -1.0, 0.25, 0.75, 4.0], dtype=np.float32)
    write_case(out, "clip_opset6_of_computed", 6,
               [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Clip", ["n"], ["y"], min=-0.5, max=2.0)],
               [("x", x)], [("y", np.clip(-x, -0.5, 2.0))])

    a = rng.normal(size=(2, 3, 4)).astype(np.float32)
    b = np.array([10.0, 20.0, 30.0], dtype=np.float32)
    write_case(out, "add_opset6_broadcast_axis", 6, [helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=1)],
               [("a", a)], [("y", a + b.reshape(3, 1))], initializers=[("b", b)])

    a = rng.normal(size=(2, 3)).astype(np.float32)
    b = np.array([2.0, -1.0], dtype=np.float32)
    write_case(out, "mul_opset6_broadcast_axis0_input", 6,
               [helper.make_node("Mul", ["a", "b"], ["y"], broadcast=1, axis=0)],
               [("a", a), ("b", b)], [("y", a * b.reshape(2, 1))])

    x = np.array([-2, 0, 7], dtype=np.int32)
    write_case(out, "cast_opset1_type_name", 1, [helper.make_node("Cast", ["x"], ["y"], to="FLOAT")],
               [("x", x)], [("y", x.astype(np.float32))])

    x = rng.normal(size=(2, 2)).astype(np.float32)
    write_case(out, "dropout_opset10_ratio_mask", 10,
               [helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.3)],
               [("x", x)], [("y", x), ("mask", np.ones((2, 2), dtype=np.bool_))])

    x = np.array([-1.0, 0.5, 2.0], dtype=np.float32)
    write_case(out, "relu_opset1_consumed_inputs", 1,
               [helper.make_node("Relu", ["x"], ["y"], consumed_inputs=[0])],
               [("x", x)], [("y", np.maximum(x, 0))])


if __name__ == "__main__":
    main()
