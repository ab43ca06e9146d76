#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (test/fuzz/corpus/) and dictionaries
(test/fuzz/dict/) from the fixtures in test/data and test/lit. Deterministic:
run it again after a fixture or a format changes, and commit what it writes.

    test/fuzz/make_seeds.py build/megac

MEGAC is a built megac (any build): it compiles the plan seeds and trains one
step for the checkpoint seed. Needs the onnx package and protoc (tools/setup.sh).

Minimized where it keeps the structure: every fixture model loses its
weights' bytes (an initializer of more than 64 elements becomes a data-less
graph input, as tools/export_shapes_only.py writes weights; megac imports and
compiles those), its doc strings and the exporter's per-node metadata, which
takes a 690 KB fixture to about 20-60 KB.
"""
import glob
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import onnx
from onnx import helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "test", "data")
CORPUS = os.path.join(HERE, "corpus")
DICT = os.path.join(HERE, "dict")


def fresh(d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


# --- ONNX models (onnx_import, onnx_plan) ---

def strip_model(m):
    """Data-less big weights, no doc strings, no per-node metadata."""
    g = m.graph
    m.doc_string = ""
    del m.metadata_props[:]
    g.doc_string = ""
    keep = []
    for t in g.initializer:
        n = 1
        for d in t.dims:
            n *= d
        if n > 64 or t.data_location == onnx.TensorProto.EXTERNAL:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            keep.append(t)
    del g.initializer[:]
    g.initializer.extend(keep)
    for n in g.node:
        n.doc_string = ""
        del n.metadata_props[:]
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        vi.doc_string = ""
        del vi.metadata_props[:]
    return m


# The models whose plans (onnx_plan's deep paths) the seeds must reach.
COMPILED = ["llama", "llama_noopt", "llama_op23", "llama_sdpa", "llama_small", "gpt2", "gpt2_noopt", "hf_tiny/llama",
            "hf_tiny/tied", "shapes_only"]


def onnx_seeds(megac):
    out = fresh(os.path.join(CORPUS, "onnx"))
    names = []
    for path in sorted(glob.glob(os.path.join(DATA, "**", "*.onnx"), recursive=True)):
        rel = os.path.relpath(path, DATA)
        name = rel.replace("/model.onnx", "").replace("/", "_").replace(".onnx", "") + ".onnx"
        m = onnx.load(path, load_external_data=False)
        write(os.path.join(out, name), strip_model(m).SerializeToString())
        names.append((rel, name))
    # Each stripped model that compiled before must still compile: otherwise
    # the seeds would not reach the passes.
    for rel, name in names:
        if not any(rel.startswith(c) for c in COMPILED):
            continue
        p = os.path.join(out, name)
        r = subprocess.run([megac, "compile", p, "--batch", "1", "--seq", "8", "-o", os.devnull],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"make_seeds: stripped {rel} does not compile:\n{r.stderr}")
    return out


# --- plans (plan_load) ---

PLAN_FLAGS = [
    ("hf_tiny_llama", "hf_tiny_llama.onnx", []),
    ("hf_tiny_tied_keep", "hf_tiny_tied.onnx", ["--recompute", "none", "--resident-units", "1"]),
    ("gpt2", "gpt2.onnx", ["--compute", "fp32", "--no-fused-loss"]),
    ("llama_op23", "llama_op23.onnx", ["--weight-slots", "3", "--recompute", "auto"]),
]


def plan_seeds(megac, onnx_dir):
    out = fresh(os.path.join(CORPUS, "plan"))
    for name, model, flags in PLAN_FLAGS:
        p = os.path.join(out, name + ".plan")
        subprocess.run([megac, "compile", os.path.join(onnx_dir, model), "--batch", "1", "--seq", "8", "-o", p] + flags,
                       check=True, capture_output=True)
    return out


# --- streaming schedules (stream_schedule) ---

SCHEDULE_FLAGS = [  # the target's plan streams every unit, steps embed and layer.0 on the GPU and recomputes:
    # only the schedule differs
    ("llama", ["--resident-units", "0", "--gpu-adamw-units", "2", "--weight-slots", "2"]),
    ("llama_slots3", ["--resident-units", "0", "--gpu-adamw-units", "2", "--weight-slots", "3"]),
    ("llama_slots4", ["--resident-units", "0", "--gpu-adamw-units", "2", "--weight-slots", "4"]),
    # layer-major accumulation: 2 micro-batches a pass (the target compiles the plan for as many)
    ("llama_mb2", ["--resident-units", "0", "--gpu-adamw-units", "2", "--weight-slots", "2", "--grad-accum", "2",
                   "--micro-batches-per-pass", "2"]),
    # checkpoint offload: every checkpoint that can leave (SAVE_CHECKPOINT, LOAD_CHECKPOINT, LOADED_CHECKPOINT regions)
    ("llama_offload", ["--resident-units", "0", "--gpu-adamw-units", "2", "--weight-slots", "2",
                       "--offload-checkpoints", "all"]),
]


def schedule_seeds(megac, pb, tmp):
    """The llama fixture's StreamSchedule at batch 2 x seq 16, fp32, every unit streamed, embed and
    layer.0 stepped on the GPU (the plan fuzz_stream_schedule builds), with 2, 3 and 4 weight slots,
    with 2 micro-batches a pass, and with its checkpoints offloaded."""
    out = fresh(os.path.join(CORPUS, "schedule"))
    for name, flags in SCHEDULE_FLAGS:
        p = os.path.join(tmp, name + ".plan")
        subprocess.run([megac, "compile", os.path.join(DATA, "llama", "model.onnx"), "--batch", "2", "--seq", "16",
                        "--compute", "fp32", "-o", p] + flags, check=True, capture_output=True)
        data = open(p, "rb").read()
        assert data[:8] == b"MEGACPLN"
        plan = pb.Plan()
        plan.ParseFromString(data[8 + 16:])  # magic, then the 16-byte header
        with open(os.path.join(out, name + ".schedule"), "wb") as f:
            f.write(plan.schedule.SerializeToString())
    return out


# --- checkpoint.meta (checkpoint_meta) ---

def plan_pb2(tmp):
    subprocess.run(["protoc", f"--python_out={tmp}", "-I", os.path.join(ROOT, "runtime", "plan"), "plan.proto"],
                   check=True)
    sys.path.insert(0, tmp)
    import plan_pb2 as pb  # noqa: E402
    return pb


MAGIC_CKPT = b"MEGACCKP"


def checkpoint_seeds(megac, onnx_dir, pb, tmp):
    out = fresh(os.path.join(CORPUS, "checkpoint"))
    # A real one: one step of the tied tiny model (its weights initialized).
    text = os.path.join(tmp, "text.txt")
    write(text, b"the quick brown fox jumps over the lazy dog. " * 40)
    ck = os.path.join(tmp, "ckpt")
    subprocess.run([megac, "train", os.path.join(onnx_dir, "hf_tiny_tied.onnx"), "--batch", "1", "--seq", "8", "--init",
                    "--text", text, "--steps", "1", "--device", "cpu", "--checkpoint-dir", ck, "--checkpoint-every",
                    "1"], check=True, capture_output=True)
    metas = sorted(glob.glob(os.path.join(ck, "*", "checkpoint.meta")))
    shutil.copy(metas[-1], os.path.join(out, "hf_tiny_tied_step1.meta"))
    # Ones that fit the 16-float params.f32 the target puts beside the meta,
    # so that its readers get past the size checks.
    def meta(name, params, elements=16, **kw):
        m = pb.CheckpointMeta(format_version=1, step=3, total_steps=10, seed=7, data_index=3, host_elements=elements,
                              micro_batches_per_step=1, model_path="model.onnx", **kw)
        for pname, shape, off in params:
            p = m.params.add(name=pname, host_offset=off)
            p.shape.extend(shape)
        m.optimizer.lr = 1e-3
        write(os.path.join(out, name + ".meta"), MAGIC_CKPT + m.SerializeToString())
    meta("two_params", [("w", [2, 4], 0), ("b", [8], 8)])
    meta("scalar_and_empty", [("s", [], 15), ("e", [0, 3], 0), ("v", [3, 5], 0)])
    meta("weight_names", [("m.w", [4, 4], 0)], weights_source="hf/model.safetensors",
         weight_names=[pb.CheckpointMeta.WeightName(param="m.w", tensor="w")])
    return out


# --- llm.c token files (token_header) ---

LLMC_MAGIC = 20240520


def token_seeds():
    out = fresh(os.path.join(CORPUS, "tokens"))
    def llmc(version, tokens):
        header = struct.pack("<3i", LLMC_MAGIC, version, len(tokens)) + bytes(1024 - 12)
        fmt = "<%dH" if version == 1 else "<%dI"
        return header + struct.pack(fmt % len(tokens), *tokens)
    write(os.path.join(out, "llmc_v1_uint16"), llmc(1, [i % 251 for i in range(40)]))
    write(os.path.join(out, "llmc_v2_uint32"), llmc(2, [(i * 7919) % 100000 for i in range(24)]))
    write(os.path.join(out, "headerless_uint16"), struct.pack("<24H", *[(i * 31) % 256 for i in range(24)]))
    write(os.path.join(out, "headerless_short"), struct.pack("<3H", 1, 2, 3))
    return out


# --- safetensors (safetensors_header) ---

def safetensors(tensors, metadata=None):
    import json
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    out = fresh(os.path.join(CORPUS, "safetensors"))
    f32 = struct.pack("<6f", 1, -2, 0.5, 3, 0, 1e-3)
    bf16 = struct.pack("<4H", 0x3F80, 0xC000, 0x3F00, 0x0000)
    f16 = struct.pack("<4H", 0x3C00, 0xC000, 0x3800, 0x0000)
    write(os.path.join(out, "f32"), safetensors([("w", "F32", [2, 3], f32)], {"format": "pt"}))
    write(os.path.join(out, "bf16_f16"), safetensors([("a", "BF16", [4], bf16), ("b", "F16", [2, 2], f16)]))
    write(os.path.join(out, "scalar_empty_i64"),
          safetensors([("s", "F32", [], struct.pack("<f", 2)), ("e", "F32", [0, 5], b""),
                       ("i", "I64", [2], struct.pack("<2q", 1, -1))]))
    write(os.path.join(out, "empty_header"), safetensors([]))
    # The head of a real save_pretrained file: its header, the data cut off.
    real = open(os.path.join(DATA, "hf_tiny", "llama", "bf16_sharded", "model-00001-of-00003.safetensors"), "rb").read()
    n = struct.unpack("<Q", real[:8])[0]
    write(os.path.join(out, "hf_bf16_shard_header_only"), real[:8 + n])
    return out


# --- IR text (ir_parse) ---

def ir_seeds():
    out = fresh(os.path.join(CORPUS, "ir"))
    for path in sorted(glob.glob(os.path.join(ROOT, "test", "lit", "**", "*.mir"), recursive=True)):
        lines = [l for l in open(path).read().splitlines() if not l.lstrip().startswith("//")]
        write(os.path.join(out, os.path.basename(path)), ("\n".join(lines).strip() + "\n").encode())
    return out


# --- dictionaries ---

def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def esc(b):
    return '"' + "".join("\\x%02x" % c for c in b) + '"'


# Sizes that overflow element counts and byte sizes, or are negative.
BIG = [0x7FFFFFFF, 1 << 31, 1 << 32, (1 << 40), (1 << 61) + 8, (1 << 62) + 4, (1 << 63) - 1, -1, -5]


def proto_dict(path, messages, extra=()):
    from google.protobuf import descriptor as d
    entries = set()
    def walk(desc, seen):
        if desc.full_name in seen:
            return
        seen.add(desc.full_name)
        for f in desc.fields:
            if f.type in (d.FieldDescriptor.TYPE_DOUBLE, d.FieldDescriptor.TYPE_FIXED64, d.FieldDescriptor.TYPE_SFIXED64):
                wts = [1]
            elif f.type in (d.FieldDescriptor.TYPE_FLOAT, d.FieldDescriptor.TYPE_FIXED32, d.FieldDescriptor.TYPE_SFIXED32):
                wts = [5]
            elif f.type in (d.FieldDescriptor.TYPE_STRING, d.FieldDescriptor.TYPE_BYTES, d.FieldDescriptor.TYPE_MESSAGE):
                wts = [2]
            else:
                wts = [0]
            repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == d.FieldDescriptor.LABEL_REPEATED
            if repeated and wts[0] != 2:
                wts.append(2)  # packed
            for wt in wts:
                entries.add(varint(f.number << 3 | wt))
            if f.type in (d.FieldDescriptor.TYPE_INT64, d.FieldDescriptor.TYPE_INT32, d.FieldDescriptor.TYPE_UINT64):
                for v in BIG:
                    entries.add(varint(f.number << 3) + varint(v))
            if f.message_type is not None:
                walk(f.message_type, seen)
    seen = set()
    for m in messages:
        walk(m, seen)
    for v in BIG:
        entries.add(varint(v))
    lines = [esc(e) for e in sorted(entries)] + ['"%s"' % s for s in extra]
    with open(path, "w") as f:
        f.write("# Generated by make_seeds.py: protobuf field tags (each wire type the field can take), \n"
                "# int fields with sizes that overflow, and names.\n")
        f.write("\n".join(lines) + "\n")


def dicts(pb):
    fresh(DICT)
    ops = set()
    for path in sorted(glob.glob(os.path.join(CORPUS, "onnx", "*.onnx"))):
        m = onnx.load(path)
        ops.update(n.op_type for n in m.graph.node)
    extra = sorted(ops) + ["ai.onnx", "com.microsoft", "location", "offset", "length", "model.onnx.data", "pkg.torch"]
    proto_dict(os.path.join(DICT, "onnx.dict"), [onnx.ModelProto.DESCRIPTOR], extra)
    proto_dict(os.path.join(DICT, "plan.dict"), [pb.Plan.DESCRIPTOR, pb.CheckpointMeta.DESCRIPTOR],
               ["MEGACPLN", "MEGACCKP"] + sorted(ops))
    ir_words = ["graph @", "opset ", "input ", "param ", "const ", "frozen ", "dense<", "external(\"", "loc(\"",
                "return ", "f32[", "f16[", "bf16[", "i64[", "i32[", "bool[", "f64[", "u8[", "[]", " = ", ", ", "%", "_",
                "{", "}", "(", ")", ":", "0x", "inf", "-inf", "nan", "2147483648", "9223372036854775807",
                "-9223372036854775808", "18446744073709551616"] + sorted(ops)
    with open(os.path.join(DICT, "ir.dict"), "w") as f:
        f.write("# Generated by make_seeds.py: the textual IR's keywords, types and op names.\n")
        f.write("\n".join('"%s"' % w.replace("\\", "\\\\").replace('"', '\\"') for w in ir_words) + "\n")
    st_words = ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"F32"', '"F16"', '"BF16"', '"F64"', '"I64"',
                '"I32"', '"U8"', '"BOOL"', '"F8_E4M3"', "[", "]", "{", "}", ":", ",", "-1", "18446744073709551615",
                "9223372036854775807", "4611686018427387905", "1e308"]
    with open(os.path.join(DICT, "safetensors.dict"), "w") as f:
        f.write("# Generated by make_seeds.py: the safetensors header's keys, dtypes and big numbers.\n")
        f.write("\n".join(esc(w.encode()) for w in st_words) + "\n")
    with open(os.path.join(DICT, "tokens.dict"), "w") as f:
        f.write("# Generated by make_seeds.py: the llm.c header's magic, versions and counts.\n")
        words = [struct.pack("<i", LLMC_MAGIC), struct.pack("<i", 1), struct.pack("<i", 2),
                 struct.pack("<i", -5), struct.pack("<i", 0x7FFFFFFF), struct.pack("<I", 0x80000000)]
        f.write("\n".join(esc(w) for w in words) + "\n")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    megac = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        pb = plan_pb2(tmp)
        onnx_dir = onnx_seeds(megac)
        plan_seeds(megac, onnx_dir)
        schedule_seeds(megac, pb, tmp)
        checkpoint_seeds(megac, onnx_dir, pb, tmp)
        token_seeds()
        safetensors_seeds()
        ir_seeds()
        dicts(pb)
    total = 0
    for dirpath, _, files in os.walk(CORPUS):
        for f in files:
            total += os.path.getsize(os.path.join(dirpath, f))
    print(f"make_seeds: {total / 1e6:.2f} MB of seeds under {os.path.relpath(CORPUS, ROOT)}")


if __name__ == "__main__":
    main()
