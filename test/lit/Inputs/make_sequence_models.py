#!/usr/bin/env python3
"""Writes small ONNX models that use SplitToSequence + SequenceAt the way
torch.onnx exports torch.split, for the lower-sequences lit test.

    make_sequence_models.py OUT_DIR

split_scalar.onnx  x f32[2,10,6] split into chunks of 4 along axis 1 (4, 4, 2);
                   y = Concat(seq[-1], seq[0], seq[1], seq[0]) along axis 1.
keepdims0.onnx     x f32[2,10,3] split along axis -1 with no split and
                   keepdims=0 (three [2,10] elements); y = Concat(seq[2], seq[-3]).
seq_output.onnx    the sequence itself is a graph output (not lowerable).
bad_position.onnx  SequenceAt at position 3 of a 3-element sequence.
runtime_position.onnx  SequenceAt at a position fed at run time.
other_use.onnx     the sequence also feeds a Concat (not a SequenceAt).
x.pb               x = arange(120) as f32[2,10,6].
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def i64(name, v):
    return numpy_helper.from_array(np.array(v, dtype=np.int64), name)


def seq_at(seq, pos_name, out_name):
    return helper.make_node("SequenceAt", [seq, pos_name], [out_name], name="at_" + out_name)


def save(name, nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.save(model, os.path.join(out, name + ".onnx"))


x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 10, 6])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
positions = [i64("p0", 0), i64("p1", 1), i64("pm1", -1), i64("p2", 2), i64("pm3", -3), i64("p3", 3)]

save("split_scalar",
     [helper.make_node("SplitToSequence", ["x", "chunk"], ["seq"], name="node_split", axis=1),
      seq_at("seq", "pm1", "last"), seq_at("seq", "p0", "first"), seq_at("seq", "p1", "second"),
      seq_at("seq", "p0", "first_again"),
      helper.make_node("Concat", ["last", "first", "second", "first_again"], ["y"], name="cat", axis=1)],
     [x], [y], [i64("chunk", 4)] + positions)

x3 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 10, 3])
save("keepdims0",
     [helper.make_node("SplitToSequence", ["x"], ["seq"], name="node_unbind", axis=-1, keepdims=0),
      seq_at("seq", "p2", "c"), seq_at("seq", "pm3", "a"),
      helper.make_node("Concat", ["c", "a"], ["y"], name="cat", axis=0)],
     [x3], [y], positions)

seq_type = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)
save("seq_output",
     [helper.make_node("SplitToSequence", ["x", "chunk"], ["seq"], name="node_split", axis=1)],
     [x], [seq_type], [i64("chunk", 4)])

save("bad_position",
     [helper.make_node("SplitToSequence", ["x", "chunk"], ["seq"], name="node_split", axis=1),
      seq_at("seq", "p3", "y")],
     [x], [y], [i64("chunk", 4)] + positions)

pos = helper.make_tensor_value_info("pos", TensorProto.INT64, [])
save("runtime_position",
     [helper.make_node("SplitToSequence", ["x", "chunk"], ["seq"], name="node_split", axis=1),
      seq_at("seq", "pos", "y")],
     [x, pos], [y], [i64("chunk", 4)])

save("other_use",
     [helper.make_node("SplitToSequence", ["x", "chunk"], ["seq"], name="node_split", axis=1),
      seq_at("seq", "p0", "first"),
      helper.make_node("Concat", ["first", "seq"], ["y"], name="misuse", axis=1)],
     [x], [y], [i64("chunk", 4)] + positions)

onnx.save_tensor(numpy_helper.from_array(np.arange(120, dtype=np.float32).reshape(2, 10, 6), "x"),
                 os.path.join(out, "x.pb"))
