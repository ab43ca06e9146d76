# Writes a two-node ONNX model (Relu, then an op megac does not know) to argv[1].
import sys

import onnx
from onnx import TensorProto, helper

nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu0"),
         helper.make_node("FooBarOp", ["r"], ["y"], name="the_foo")]
graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10), sys.argv[1])
