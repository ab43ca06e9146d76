#!/usr/bin/env python3
"""Generates ONNX node tests for default-domain opsets 18..23 from the
installed onnx package's backend test cases (Debian's libonnx-testdata
stops at ONNX 1.12 / opset 17).

    generate_opset18plus.py OUT_DIR [--ops "Add Cast ..."]

Each test is written like onnx's own test data (OUT_DIR/NAME/model.onnx,
test_data_set_0/input_N.pb, output_N.pb), named NAME_opsetV so that it
never collides with a Debian test of the same case.

Kept: node tests whose default-domain opset is >= 18, whose nodes are all in
the default domain and (with --ops) all of those op types, and whose inputs
and outputs are tensors of element types megac has. Newer onnx releases
write many cases at opsets 24..28, above what megac accepts (23); such a
test is retargeted to opset 23 when the onnx checker accepts it there (so
every op, attribute, input count and type exists at 23) and the op's
semantics did not change after 23 (see SEMANTICS_CHANGED_AFTER_23).
ir_version is capped at 10.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import sys
import warnings

import onnx
from onnx import TensorProto, numpy_helper

MIN_OPSET = 18
MAX_OPSET = 23  # the newest opset megac imports
MAX_IR_VERSION = 10

# Element types megac's DType has (runtime/core/DType.h).
MEGAC_DTYPES = {
    TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16,
    TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.DOUBLE,
    TensorProto.UINT32, TensorProto.UINT64, TensorProto.BFLOAT16,
}


def mod_float_floor(model: onnx.ModelProto) -> bool:
    # Mod-28 defines fmod=0 for floating-point inputs; Mod-13 allows integers only.
    for n in model.graph.node:
        if n.op_type != "Mod":
            continue
        fmod = next((a.i for a in n.attribute if a.name == "fmod"), 0)
        if fmod == 0 and any(vi.type.tensor_type.elem_type in (TensorProto.FLOAT, TensorProto.DOUBLE,
                                                               TensorProto.FLOAT16, TensorProto.BFLOAT16)
                             for vi in model.graph.input):
            return True
    return False


# Cases written above opset 23 whose meaning at opset 23 differs although the
# checker accepts them there.
SEMANTICS_CHANGED_AFTER_23 = [mod_float_floor]


def default_opset(model: onnx.ModelProto) -> int | None:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return None


def tensor_io_types_ok(model: onnx.ModelProto) -> bool:
    for vi in list(model.graph.input) + list(model.graph.output):
        if not vi.type.HasField("tensor_type") or vi.type.tensor_type.elem_type not in MEGAC_DTYPES:
            return False
    for n in model.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type not in MEGAC_DTYPES:
                return False
            if n.op_type in ("Cast", "EyeLike", "RandomNormal", "RandomUniform") and a.name in ("to", "dtype") \
                    and a.i not in MEGAC_DTYPES:
                return False
    return True


def retarget_to_23(model: onnx.ModelProto) -> onnx.ModelProto | None:
    m = copy.deepcopy(model)
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = MAX_OPSET
    m.ir_version = min(m.ir_version, MAX_IR_VERSION)
    for n in m.graph.node:
        try:
            onnx.defs.get_schema(n.op_type, MAX_OPSET, "")
        except onnx.defs.SchemaError:
            return None
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception:  # noqa: BLE001 - any checker or inference complaint rules the case out
        return None
    if any(changed(m) for changed in SEMANTICS_CHANGED_AFTER_23):
        return None
    return m


def write_tensor(path: str, value, name: str) -> None:
    proto = value if isinstance(value, TensorProto) else numpy_helper.from_array(value, name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def write_case(out_dir: str, name: str, model: onnx.ModelProto, inputs, outputs) -> None:
    d = os.path.join(out_dir, name)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for j, x in enumerate(inputs):
        write_tensor(os.path.join(data, f"input_{j}.pb"), x, model.graph.input[j].name)
    for j, y in enumerate(outputs):
        write_tensor(os.path.join(data, f"output_{j}.pb"), y, model.graph.output[j].name)


def collect_node_cases():
    from onnx.backend.test.case import node

    # The case modules print numpy warnings and some progress; keep the log clean.
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return node.collect_testcases()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--ops", help="space- or comma-separated op types; keep only tests using these alone")
    args = ap.parse_args()
    ops = set(args.ops.replace(",", " ").split()) if args.ops else None

    os.makedirs(args.out_dir, exist_ok=True)
    kept = retargeted = 0
    dropped: dict[str, int] = {}

    def drop(why: str) -> None:
        dropped[why] = dropped.get(why, 0) + 1

    for case in collect_node_cases():
        model = case.model
        opset = default_opset(model)
        if case.kind != "node" or model is None or not case.data_sets or len(case.data_sets) != 1:
            drop("not a single-data-set node test")
            continue
        if opset is None or opset < MIN_OPSET:
            drop(f"opset below {MIN_OPSET}")
            continue
        if any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
            drop("non-default domain")
            continue
        if ops is not None and any(n.op_type not in ops for n in model.graph.node):
            drop("op megac does not support")
            continue
        if not tensor_io_types_ok(model):
            drop("non-tensor or dtype megac lacks")
            continue
        if opset > MAX_OPSET:
            model = retarget_to_23(model)
            if model is None:
                drop(f"opset {opset} case not valid at opset {MAX_OPSET}")
                continue
            retargeted += 1
        else:
            model = copy.deepcopy(model)
            model.ir_version = min(model.ir_version, MAX_IR_VERSION)
        inputs, outputs = case.data_sets[0]
        write_case(args.out_dir, f"{case.name}_opset{default_opset(model)}", model, inputs, outputs)
        kept += 1

    print(f"generate_opset18plus: onnx {onnx.__version__}: wrote {kept} tests to {args.out_dir} "
          f"({retargeted} retargeted to opset {MAX_OPSET})", file=sys.stderr)
    for why, n in sorted(dropped.items()):
        print(f"  dropped {n}: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
