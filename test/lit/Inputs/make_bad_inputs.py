"""Writes the damaged files of bad-sizes.test into OUTDIR, each from the llama
fixture (test/data/llama) with one thing wrong: sizes in the file that lie
about the bytes present, a fixed input shape, a non-finite weight, tensor
files and token files with impossible headers.
Usage: make_bad_inputs.py FIXTURE_DIR OUTDIR"""
import os
import struct
import sys

import onnx

fixture, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)


def model():
    return onnx.load(os.path.join(fixture, "model.onnx"))


def init(m, name):
    return next(i for i in m.graph.initializer if i.name == name)


def save(m, name):
    with open(os.path.join(out, name), "wb") as f:
        f.write(m.SerializeToString())


# A norm weight whose first dim claims 2^31 - 1 elements (its bytes hold 64).
m = model()
init(m, "m.model.norm.weight").dims[0] = 2147483647
save(m, "norm_int_max.onnx")

# Dims whose product wraps to 64 in 64 bits: [2^61 + 8, 8] over 256 bytes.
m = model()
w = init(m, "m.model.norm.weight")
del w.dims[:]
w.dims.extend([(1 << 61) + 8, 8])
save(m, "norm_wraps.onnx")

# A MatMul weight [4, 2^62 + 4].
m = model()
w = init(m, "val_93")
del w.dims[:]
w.dims.extend([4, (1 << 62) + 4])
save(m, "matmul_huge.onnx")

# The token input fixed at [2^40, 2^40].
m = model()
dims = m.graph.input[0].type.tensor_type.shape.dim
for d in dims:
    d.Clear()
    d.dim_value = 1 << 40
save(m, "fixed_input.onnx")

# A MatMul weight holding NaN.
m = model()
w = init(m, "val_93")
w.raw_data = struct.pack("<f", float("nan")) + w.raw_data[4:]
save(m, "nan_weight.onnx")

# input_ids.pb: dims [2^61 + 1, 8] over 64 bytes of int64.
t = onnx.TensorProto()
t.data_type = onnx.TensorProto.INT64
t.dims.extend([(1 << 61) + 1, 8])
t.raw_data = bytes(64)
with open(os.path.join(out, "ids_wraps.pb"), "wb") as f:
    f.write(t.SerializeToString())

# llm.c token file whose header promises -5 tokens.
header = struct.pack("<3i", 20240520, 1, -5) + bytes(1024 - 12)
with open(os.path.join(out, "negative_count.bin"), "wb") as f:
    f.write(header + bytes(4096))
