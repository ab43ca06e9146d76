#!/usr/bin/env python3
"""Writes the hand-made regression inputs under test/fuzz/regressions/: the
smallest input of each crash class the fuzzers found (README.md lists them,
with the fuzzer's own minimized inputs beside these). Each is the minimal
form of a fuzzer finding, written out so that its one defect is plain.

    test/fuzz/make_regressions.py
"""
import os
import struct
import subprocess
import sys
import tempfile

from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REG = os.path.join(HERE, "regressions")


def write(target, name, data):
    os.makedirs(os.path.join(REG, target), exist_ok=True)
    with open(os.path.join(REG, target, name), "wb") as f:
        f.write(data)


def model(initializers=(), nodes=None, opset=20):
    """x: f32[2] plus each initializer, through Add, to y."""
    nodes = nodes or [helper.make_node("Add", ["x", initializers[0].name], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    m.producer_name = ""
    return m.SerializeToString()


def raw_tensor(name, dims, nbytes):
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, raw_data=bytes(nbytes))
    t.dims.extend(dims)
    return t


def onnx_regressions():
    # tensorFromProto allocates numel(dims) before comparing with the 256 bytes present.
    big = model([raw_tensor("w", [2 ** 32, 64], 256)])
    write("onnx_import", "initializer_dims_2e38_bytes_256.onnx", big)
    write("onnx_plan", "initializer_dims_2e38_bytes_256.onnx", big)
    # numElements overflows int64: [2^61+8, 8] is 2^64+64 elements (wraps to 64).
    wrap = model([raw_tensor("w", [2 ** 61 + 8, 8], 256)])
    write("onnx_import", "initializer_dims_wrap_to_64.onnx", wrap)
    # The same, in a Constant node's value attribute (importConstant).
    const = model(nodes=[helper.make_node("Constant", [], ["c"], value=raw_tensor("v", [2 ** 32, 64], 256)),
                         helper.make_node("Add", ["x", "c"], ["y"])])
    write("onnx_import", "constant_value_dims_2e38_bytes_256.onnx", const)


def clip_regressions():
    # Clip-6's float min attribute becomes a constant of x's type (boundLike): -1 into uint8 is a
    # float-to-integer conversion out of range (UB) in Tensor::setFromDouble.
    g = helper.make_graph([helper.make_node("Clip", ["x"], ["y"], min=-1.0)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)], ir_version=3)
    write("onnx_import", "clip6_min_minus_1_on_uint8.onnx", m.SerializeToString())


def specialize_regressions():
    # MatMul with its first input omitted (""): inferMatMul binds *c.inputType(0), a null pointer.
    g = helper.make_graph([helper.make_node("MatMul", ["", "x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    write("onnx_plan", "matmul_omitted_input.onnx", m.SerializeToString())
    # Expand to a constant shape [2^62, 4]: specialize's canFold sums numElements of the
    # result's shape unchecked (int64 overflow) before comparing with the fold limit.
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [2 ** 62, 4])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    g = helper.make_graph([helper.make_node("Expand", ["one", "s"], ["e"]), helper.make_node("Add", ["x", "e"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape, one])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    write("onnx_plan", "expand_to_2e64_elements.onnx", m.SerializeToString())


def dataless_regressions():
    # A data-less weight (a graph input, as shapes-only exports write weights) of [2^61+8, 8]:
    # nothing is allocated at import, then classify-params' numElements overflows int64.
    g = helper.make_graph(
        [helper.make_node("Gather", ["w", "input_ids"], ["logits"])], "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [2 ** 61 + 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    write("onnx_plan", "dataless_weight_dims_wrap.onnx", m.SerializeToString())


def token_regressions():
    # llm.c header promising -5 tokens: start + count * width wraps below the file size.
    header = struct.pack("<3i", 20240520, 1, -5) + bytes(1024 - 12)
    write("token_header", "llmc_count_minus_5", header + bytes(8))


def plan_pb2(tmp):
    subprocess.run(["protoc", f"--python_out={tmp}", "-I", os.path.join(ROOT, "runtime", "plan"), "plan.proto"],
                   check=True)
    sys.path.insert(0, tmp)
    import plan_pb2 as pb  # noqa: E402
    return pb


def checkpoint_regressions(pb):
    def meta(name, elements):
        m = pb.CheckpointMeta(format_version=1, step=1, total_steps=2, host_elements=elements)
        p = m.params.add(name="w", host_offset=0)
        p.shape.extend([16])
        write("checkpoint_meta", name, b"MEGACCKP" + m.SerializeToString())
    # readCheckpointArray: elements * 4 in the size-mismatch message overflows int64 (UBSan).
    meta("host_elements_2e62_plus_1", 2 ** 62 + 1)
    # readCheckpointArray: size_t(elements) * 4 wraps to 64, the params.f32 beside it has 64 bytes,
    # so the check passes and std::vector<float>(2^62 + 16) throws (or allocates 2^64 bytes).
    meta("host_elements_2e62_plus_16_wraps_to_file_size", 2 ** 62 + 16)


def plan_regressions(pb):
    # PlanChecker -> checkArena -> computeLifetimes -> typeBytes: numel * dtype size of a value's
    # shape, as the plan file gives it, overflows int64.
    seed = open(os.path.join(HERE, "corpus", "plan", "hf_tiny_llama.plan"), "rb").read()
    p = pb.Plan()
    p.ParseFromString(seed[8:])
    v = next(v for v in p.templates[0].forward.values if v.kind == pb.Program.Value.TEMP)  # an op writes it
    del v.type.shape[:]
    v.type.shape.extend([2 ** 62 + 4, 4])
    write("plan_load", "value_shape_bytes_overflow.plan", b"MEGACPLN" + p.SerializeToString())


def main():
    onnx_regressions()
    dataless_regressions()
    clip_regressions()
    specialize_regressions()
    token_regressions()
    with tempfile.TemporaryDirectory() as tmp:
        pb = plan_pb2(tmp)
        checkpoint_regressions(pb)
        plan_regressions(pb)


if __name__ == "__main__":
    main()
