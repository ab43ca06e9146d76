"""Checks a `megac export --hf` directory against the checkpoint it came from.

usage: check_hf_export.py STEP_DIR OUT_DIR [--like HF_DIR] [--dtype F32|BF16] [--shards N]
                          [--graph-safetensors F] [--config-from DIR] [--same-tensors-as DIR]

Reads the checkpoint with check_export.py's protobuf decoder and numpy (no code
shared with megac), and the export as from_pretrained would: the index (when
there are shards) or model.safetensors, each file's header and data. Checks:
- the files: model.safetensors alone, or model-0000i-of-0000N.safetensors with a
  model.safetensors.index.json whose weight_map names every tensor's file and
  whose metadata.total_size / total_parameters add up; each file's metadata
  {"format": "pt", ...}, its data contiguous, tensors in name order;
- names and shapes: with --like, exactly those of the Hugging Face checkpoint
  HF_DIR (the one the run loaded: the same names, shapes, no more, no less);
- data: each tensor is the checkpoint's parameter of that name (the name the
  checkpoint recorded for it at load, else 'm.' + name), bit for bit in F32, and
  rounded to nearest even in BF16 (rounded here by numpy);
- with --graph-safetensors, the same bytes as `megac export --safetensors`;
- with --same-tensors-as DIR, every tensor (dtype, shape, bytes) that of DIR;
- config.json and the other files copied from --config-from (default --like):
  byte for byte, config.json's dtype set to what was written.
"""
import argparse, json, os, re, struct, sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from check_export import fields, read_checkpoint  # noqa: E402
import megac_files  # noqa: E402  (the checkpoint file format)


def read_header(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    assert (8 + n) % 8 == 0, path + ": data not 8-byte aligned"
    header = json.loads(data[8:8 + n])
    return header, data[8 + n:]


def read_file(path):
    """name -> (dtype, shape, raw bytes), metadata, names in file order."""
    header, body = read_header(path)
    meta = header.pop("__metadata__", None)
    out, end = {}, 0
    order = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    for name in order:
        t = header[name]
        b, e = t["data_offsets"]
        assert b == end, path + ": a hole or an overlap at " + name
        out[name] = (t["dtype"], list(t["shape"]), body[b:e])
        end = e
    assert end == len(body), path + ": bytes after the tensors"
    return out, meta, order


def read_dir(d):
    """All tensors of a save_pretrained directory, and the files that hold them."""
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    index = os.path.join(d, "model.safetensors.index.json")
    tensors, where, metas = {}, {}, {}
    for f in files:
        t, meta, order = read_file(os.path.join(d, f))
        metas[f] = meta
        for name, v in t.items():
            assert name not in tensors, name + " in two files"
            tensors[name] = v
            where[name] = f
        assert order == sorted(order), f + ": tensors not in name order"
    return files, index if os.path.exists(index) else None, tensors, where, metas


def recorded_names(step_dir):
    """parameter -> the tensor name recorded at load (CheckpointMeta.weight_names)."""
    _, payload, ok = megac_files.read_meta(os.path.join(step_dir, "checkpoint.meta"))
    assert ok, step_dir + ": checkpoint.meta fails its own checksum"
    out = {}
    for num, wt, v in fields(payload):
        if num == 12:
            kv = {pn: pv.decode() for pn, _, pv in fields(v)}
            out[kv[1]] = kv[2]
    return out


def bf16(a):
    u = a.astype("<f4").view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("step_dir")
    ap.add_argument("out")
    ap.add_argument("--like")
    ap.add_argument("--dtype", default="F32")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--graph-safetensors")
    ap.add_argument("--config-from")
    ap.add_argument("--same-tensors-as", help="a save_pretrained directory whose tensors the export equals byte for byte")
    a = ap.parse_args()

    meta, params = read_checkpoint(a.step_dir)
    files, index, tensors, where, metas = read_dir(a.out)

    # The files, as save_pretrained names and indexes them.
    if a.shards == 1:
        assert files == ["model.safetensors"] and index is None, (files, index)
    else:
        n = a.shards
        assert files == ["model-%05d-of-%05d.safetensors" % (i, n) for i in range(1, n + 1)], files
        assert index, "no model.safetensors.index.json"
        idx = json.load(open(index))
        assert idx["weight_map"] == where, "weight_map differs from the files' contents"
        assert idx["metadata"]["total_size"] == sum(len(v[2]) for v in tensors.values())
        assert idx["metadata"]["total_parameters"] == sum(int(np.prod(v[1])) for v in tensors.values())
        assert open(index).read() == json.dumps(idx, indent=2, sort_keys=True) + "\n", "index not as json.dumps writes it"
    for f, m in metas.items():
        assert m is not None and m.get("format") == "pt", (f, m)

    # Names and shapes: the Hugging Face checkpoint's.
    if a.like:
        _, _, like, _, _ = read_dir(a.like)
        assert set(tensors) == set(like), "names differ: %s" % sorted(set(tensors) ^ set(like))
        for name, (_, shape, _) in tensors.items():
            assert shape == like[name][1], (name, shape, like[name][1])

    # Data: the checkpoint's parameters, bit for bit (F32) or rounded to nearest even (BF16).
    names = recorded_names(a.step_dir)
    by_tensor = {t: p for p, t in names.items()}
    taken = set()
    for name, (dtype, shape, raw) in tensors.items():
        p = by_tensor.get(name, "m." + name)
        assert p in params, name + ": no parameter " + p
        assert p not in taken, p + " written twice"
        taken.add(p)
        assert dtype == a.dtype, (name, dtype)
        assert shape == list(params[p].shape), (name, shape, params[p].shape)
        want = params[p].tobytes() if dtype == "F32" else bf16(params[p]).tobytes()
        assert raw == want, name + " differs from the checkpoint's " + p
    assert taken == set(params), "parameters not written: %s" % sorted(set(params) - taken)

    if a.same_tensors_as:
        _, _, other, _, _ = read_dir(a.same_tensors_as)
        assert set(other) == set(tensors)
        for name, v in other.items():
            assert tensors[name] == v, name + " differs from " + a.same_tensors_as
        print("same tensors as %s: %d" % (os.path.basename(a.same_tensors_as.rstrip("/")), len(other)))

    if a.graph_safetensors:
        g, gmeta, _ = read_file(a.graph_safetensors)
        assert gmeta == {"format": "megac"}, gmeta
        for name, (_, _, raw) in tensors.items():
            p = by_tensor.get(name, "m." + name)
            assert g[p][2] == raw, name + " differs from --safetensors' " + p

    # Configuration files copied; config.json's dtype what was written.
    src = a.config_from or a.like
    if src:
        wrote = "bfloat16" if a.dtype == "BF16" else "float32"
        copied = sorted(f for f in os.listdir(a.out) if not f.endswith(".safetensors") and f != "model.safetensors.index.json")
        for f in copied:
            got, orig = open(os.path.join(a.out, f), "rb").read(), open(os.path.join(src, f), "rb").read()
            if f == "config.json":
                orig = re.sub(rb'"(torch_dtype|dtype)": "[a-z0-9]+"', b'"\\1": "' + wrote.encode() + b'"', orig)
                assert json.loads(got).get("dtype", wrote) == wrote
            assert got == orig, f + " is not the copy of " + os.path.join(src, f)
        print("config ok: " + " ".join(copied))

    print("hf export ok: %d tensors of step %d in %d file(s), %s, as the checkpoint holds them"
          % (len(tensors), meta["step"], len(files), a.dtype))


if __name__ == "__main__":
    main()
