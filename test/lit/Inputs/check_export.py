"""Checks a `megac export` result against the checkpoint it came from.

usage: check_export.py STEP_DIR ORIGINAL.onnx EXPORTED.onnx [--safetensors F] [--external]
                       [--logits megac_logits.pb --input input_ids.pb]
Reads checkpoint.meta with a small protobuf decoder (plan.proto's CheckpointMeta)
and params.f32 with numpy, so it shares no code with megac.
"""
import argparse, json, os, struct, sys

import numpy as np
import onnx
from onnx import numpy_helper


def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, i


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("bad wire type")
        yield num, wt, v


def read_checkpoint(step_dir):
    data = open(os.path.join(step_dir, "checkpoint.meta"), "rb").read()
    assert data[:8] == b"MEGACCKP", "bad magic"
    # Format 1: the message after the magic; 2 on: a 16-byte header between.
    payload = data[8:] if data[8] == 0x08 else data[24:]
    meta = {"params": []}
    for num, wt, v in fields(payload):
        if num == 2 and wt == 0:
            meta["step"] = v
        elif num == 6:
            meta["host_elements"] = v
        elif num == 7:
            p = {"shape": [], "offset": 0}
            for pn, pwt, pv in fields(v):
                if pn == 1:
                    p["name"] = pv.decode()
                elif pn == 2 and pwt == 2:  # packed
                    j = 0
                    while j < len(pv):
                        d, j = varint(pv, j)
                        p["shape"].append(d)
                elif pn == 2:
                    p["shape"].append(pv)
                elif pn == 3:
                    p["offset"] = pv
            meta["params"].append(p)
    host = np.fromfile(os.path.join(step_dir, "params.f32"), dtype="<f4")
    assert host.size == meta["host_elements"], (host.size, meta["host_elements"])
    params = {}
    for p in meta["params"]:
        n = int(np.prod(p["shape"])) if p["shape"] else 1
        params[p["name"]] = host[p["offset"]:p["offset"] + n].reshape(p["shape"])
    return meta, params


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    meta = header.pop("__metadata__")
    tensors, end = {}, 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = t["data_offsets"]
        assert b == end, "safetensors data has a hole or overlap at " + name
        assert t["dtype"] == "F32"
        tensors[name] = np.frombuffer(body[b:e], dtype="<f4").reshape(t["shape"])
        end = e
    assert end == len(body), "trailing bytes after the tensors"
    return meta, list(header.keys()), tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("step_dir")
    ap.add_argument("original")
    ap.add_argument("exported")
    ap.add_argument("--safetensors")
    ap.add_argument("--external", action="store_true")
    ap.add_argument("--logits")
    ap.add_argument("--input")
    a = ap.parse_args()

    meta, params = read_checkpoint(a.step_dir)
    orig = onnx.load(a.original)
    exp = onnx.load(a.exported, load_external_data=False)
    if a.external:
        ext = [t for t in exp.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        assert ext, "no external initializers"
        for t in ext:
            kv = {e.key: e.value for e in t.external_data}
            assert kv["location"] == os.path.basename(a.exported) + ".data", kv
            assert int(kv["offset"]) % 64 == 0, kv
        for t in exp.graph.initializer:
            if t.data_location != onnx.TensorProto.EXTERNAL:
                assert numpy_helper.to_array(t).nbytes < 1024, t.name
        onnx.load_external_data_for_model(exp, os.path.dirname(os.path.abspath(a.exported)))
    else:
        assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in exp.graph.initializer)
    onnx.checker.check_model(exp)

    o = {t.name: numpy_helper.to_array(t) for t in orig.graph.initializer}
    e = {t.name: numpy_helper.to_array(t) for t in exp.graph.initializer}
    assert set(o) == set(e), set(o) ^ set(e)
    changed = 0
    for name, arr in e.items():
        if name in params:
            assert arr.dtype == np.float32 and arr.shape == params[name].shape, name
            assert arr.tobytes() == params[name].tobytes(), name + " differs from the checkpoint"
            changed += not np.array_equal(arr, o[name])
        else:
            assert arr.dtype == o[name].dtype and arr.tobytes() == o[name].tobytes(), name + " changed"
    assert changed == len(params), "%d of %d parameters differ from the original" % (changed, len(params))
    print("onnx ok: %d parameters from step %d, %d other initializers unchanged"
          % (len(params), meta["step"], len(e) - len(params)))

    if a.safetensors:
        smeta, order, tensors = read_safetensors(a.safetensors)
        assert smeta == {"format": "megac"}, smeta
        assert order == sorted(order), "not in name order"
        assert set(tensors) == set(params), set(tensors) ^ set(params)
        for name, arr in tensors.items():
            assert arr.tobytes() == params[name].tobytes() and arr.shape == params[name].shape, name
        print("safetensors ok: %d tensors" % len(tensors))

    if a.logits:
        from onnx.reference import ReferenceEvaluator
        ids = numpy_helper.to_array(onnx.load_tensor(a.input))
        ref = ReferenceEvaluator(exp).run(None, {exp.graph.input[0].name: ids})[0]
        got = numpy_helper.to_array(onnx.load_tensor(a.logits))
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert err < 1e-5, err
        print("logits ok: megac forward matches the ONNX reference evaluator")


if __name__ == "__main__":
    main()
