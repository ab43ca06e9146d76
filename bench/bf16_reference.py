"""PyTorch's own bf16-autocast training trajectory on each model fixture: the yardstick for
megac's bf16 mode (issue 5: megac's five-step trajectory must be no farther from the fp32
reference than PyTorch's bf16-autocast one, times 1.5).

For each fixture folder test/data/<name> with a meta.json (written by the exporter that
made the fixtures), this rebuilds the same Hugging Face model (config from
meta.json, seed 0, norm scales and biases perturbed the same way), then loads the fixture's
own ONNX initializers into it (through meta.json's initializer_map, transposing where marked;
by exact content match where there is no map), so the weights are the fixture's bit for bit
whatever the rebuild gives; it reports how far the rebuild was from them (0 expected). It
checks the fp32 loss against ref/loss.pb, then runs the five AdamW steps of the fixture README
(lr 1e-2, betas (0.9, 0.95), eps 1e-8, weight decay 0.1, the batch ref/input_ids.pb ->
ref/targets.pb, the loss taken before each step) twice on the device:
  - fp32 (TF32 off), a sanity check against ref/losses_adamw.pb (within 5e-4, the README's bound);
  - under torch.autocast(device, dtype=torch.bfloat16) with fp32 master weights (the parameters
    and AdamW stay fp32; the logits are upcast before the cross-entropy, as transformers' own
    loss does). This one is written to <out>/<name>/ref/losses_adamw_bf16_autocast.pb
    (float32 [5], a serialized ONNX TensorProto like the other refs), and
    max |bf16 - ref/losses_adamw.pb| is printed.
The trajectory amplifies rounding (one run's distance is one draw), so it also writes
  - ref/losses_adamw_bf16_autocast_ensemble.pb: float32 [K, 5], K bf16-autocast runs from the
    start weights nudged one fp32 ulp up or down per element (--ensemble K, default 8; the
    fixtures hold K = 16), with the fp32 spread under the same nudges printed beside it;
  - ref/grad_error_bf16_autocast.pb: float32 [2], the first step's autocast gradients against
    the fp32 ones: mean relative L2 error over parameters, fraction of elements whose sign flips.

Needs torch, transformers and numpy; onnx if present (a minimal protobuf reader/writer for
TensorProto and ModelProto initializers stands in where it is not).

Usage (GPU machine, repo root):  /opt/torch/.venv/bin/python bench/bf16_reference.py --device cuda
  --out DIR   where the .pb files and bf16_reference.json go (default: $OUT if set, else the
              fixture folders themselves on cuda; nothing is written on cpu unless --out is given)
  --fixtures llama,gpt2   a subset (default: every folder with meta.json)
Smoke test on a CPU:  python bench/bf16_reference.py --device cpu   (CPU autocast, bf16)
"""
import argparse
import copy
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import transformers as tf

try:
    import onnx
    from onnx import numpy_helper
except ImportError:  # the tiny reader below covers what this script needs
    onnx = None

LR, BETAS, EPS, WEIGHT_DECAY, STEPS = 1e-2, (0.9, 0.95), 1e-8, 0.1, 5
FP32_TRAJECTORY_TOL = 5e-4  # the fixture README's bound for fp32 arithmetic
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --- ONNX TensorProto I/O, with a protobuf-free fallback --------------------------------

_NP_OF_ONNX = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_,
               10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}


def _varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf):
    """Yields (field number, wire type, value) of one protobuf message; value is an int for
    varints, bytes for length-delimited and fixed-width fields."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wt}")
        yield num, wt, v


def _packed_varints(v):
    out, i = [], 0
    while i < len(v):
        x, i = _varint(v, i)
        out.append(x)
    return out


def _tensor_from_proto_bytes(buf, base_dir):
    """TensorProto fields: dims=1 data_type=2 float_data=4 int32_data=5 int64_data=7 name=8
    raw_data=9 double_data=10 external_data=13 (key=1 value=2) data_location=14."""
    dims, dtype, name, raw, ext = [], 1, "", None, {}
    floats, int32s, int64s, doubles = [], [], [], []
    for num, wt, v in _fields(buf):
        if num == 1:
            dims += _packed_varints(v) if wt == 2 else [v]
        elif num == 2:
            dtype = v
        elif num == 8:
            name = bytes(v).decode()
        elif num == 9:
            raw = bytes(v)
        elif num == 4:
            floats += list(struct.unpack(f"<{len(v) // 4}f", v)) if wt == 2 else list(struct.unpack("<f", v))
        elif num == 5:
            int32s += _packed_varints(v) if wt == 2 else [v]
        elif num == 7:
            int64s += _packed_varints(v) if wt == 2 else [v]
        elif num == 10:
            doubles += list(struct.unpack(f"<{len(v) // 8}d", v)) if wt == 2 else list(struct.unpack("<d", v))
        elif num == 13:
            kv = {k: bytes(x).decode() for k, _, x in _fields(v)}
            ext[kv.get(1, "")] = kv.get(2, "")
    np_dtype = np.dtype(_NP_OF_ONNX[dtype])
    if ext:
        with open(os.path.join(base_dir, ext["location"]), "rb") as f:
            f.seek(int(ext.get("offset", 0)))
            length = int(ext["length"]) if "length" in ext else int(np.prod(dims)) * np_dtype.itemsize
            raw = f.read(length)
    if raw is not None:
        arr = np.frombuffer(raw, dtype=np_dtype.newbyteorder("<")).astype(np_dtype)
    elif dtype in (1, 10):
        arr = np.array(floats, dtype=np.float32).astype(np_dtype)
    elif dtype == 11:
        arr = np.array(doubles, dtype=np.float64)
    elif dtype in (7, 13):
        arr = np.array([x - (1 << 64) if dtype == 7 and x >= 1 << 63 else x for x in int64s], dtype=np_dtype)
    else:
        arr = np.array([x - (1 << 64) if x >= 1 << 63 else x for x in int32s]).astype(np_dtype)
    return name, arr.reshape(dims)


def read_tensor(path):
    if onnx is not None:
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        return numpy_helper.to_array(t)
    with open(path, "rb") as f:
        return _tensor_from_proto_bytes(memoryview(f.read()), os.path.dirname(path))[1]


def read_initializers(model_path):
    """name -> array for every initializer of an ONNX model (external data included)."""
    if onnx is not None:
        m = onnx.load(model_path)  # resolves external data relative to the model's folder
        return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    with open(model_path, "rb") as f:
        buf = memoryview(f.read())
    graph = next(v for num, wt, v in _fields(buf) if num == 7)  # ModelProto.graph
    return dict(_tensor_from_proto_bytes(v, os.path.dirname(model_path))
                for num, wt, v in _fields(graph) if num == 5)  # GraphProto.initializer


def write_tensor(path, arr, name):
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if onnx is not None:
        data = numpy_helper.from_array(arr, name).SerializeToString()
    else:  # dims=1 (varint each), data_type=2, name=8, raw_data=9
        def vint(x):
            out = bytearray()
            while True:
                b, x = x & 0x7F, x >> 7
                out.append(b | (0x80 if x else 0))
                if not x:
                    return bytes(out)
        raw = arr.astype("<f4").tobytes()
        data = b"".join(b"\x08" + vint(d) for d in arr.shape) + b"\x10\x01"
        data += b"\x42" + vint(len(name)) + name.encode() + b"\x4a" + vint(len(raw)) + raw
    with open(path, "wb") as f:
        f.write(data)


# --- the model, rebuilt as test/data/make_fixtures.py built it ----------------------------

def rebuild_model(meta):
    """test/data/make_fixtures.py: torch.manual_seed(0), attention implementation set on the config,
    from_config(...).float().eval(), then every 1-D all-ones or all-zeros parameter += 0.1*randn."""
    config = dict(meta["config"])
    model_type = config.pop("model_type")
    config.pop("transformers_version", None)
    cfg = type(tf.AutoConfig.for_model(model_type)).from_dict(config)
    torch.manual_seed(0)
    try:
        cfg._attn_implementation = meta["attn"]
    except Exception:
        pass
    model = tf.AutoModelForCausalLM.from_config(cfg).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1 and bool((p == 1).all()):
                p.add_(0.1 * torch.randn_like(p))
            elif p.dim() == 1 and bool((p == 0).all()):
                p.add_(0.1 * torch.randn_like(p))
    return model


def fixture_weights(meta, inits, params):
    """param name -> the fixture's own value: through initializer_map where meta.json has one,
    else by exact content match (a parameter or its transpose) among the initializers."""
    found = {}
    if "initializer_map" in meta:
        for onnx_name, e in meta["initializer_map"].items():
            a = inits[onnx_name]
            found[e["param"]] = a.T if e["transposed"] else a
        return found
    for name, p in params.items():
        want = p.detach().cpu().numpy()
        for a in inits.values():
            if a.dtype != want.dtype:
                continue
            if a.shape == want.shape and np.array_equal(a, want):
                found[name] = a
                break
            if a.ndim == 2 and a.T.shape == want.shape and np.array_equal(a.T, want):
                found[name] = a.T
                break
    return found


def load_fixture_weights(model, meta, model_path):
    """Copies the fixture's weights into the model; returns (max |rebuild - fixture|, how many
    parameters were found in the ONNX file, how many the model has)."""
    params = dict(model.named_parameters())
    found = fixture_weights(meta, read_initializers(model_path), params)
    worst = 0.0
    with torch.no_grad():
        for name, value in found.items():
            p = params[name]
            t = torch.from_numpy(np.array(value, copy=True)).to(p.dtype)
            if tuple(t.shape) != tuple(p.shape):
                raise SystemExit(f"{model_path}: {name} is {list(t.shape)} in the file, {list(p.shape)} in the model")
            worst = max(worst, float((p - t).abs().max()))
            p.copy_(t)
    return worst, len(found), len(params)


# --- the five AdamW steps -------------------------------------------------------------------

def loss_of(model, ids, tgt):
    logits = model(input_ids=ids, use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def nudge_one_ulp(model, seed):
    """Every weight moved one fp32 ulp up or down (a fair coin per element, seeded): a change
    far below what fp32 training resolves, which re-rolls every bf16 rounding."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            up = torch.rand(p.shape, generator=g) < 0.5
            toward = torch.where(up, torch.full_like(p, float("inf")), torch.full_like(p, float("-inf")))
            p.copy_(torch.nextafter(p, toward))
    return model


def trajectory(model, ids, tgt, device, bf16, nudge_seed=None):
    model = copy.deepcopy(model)
    if nudge_seed is not None:
        nudge_one_ulp(model, nudge_seed)
    model = model.to(device)  # fp32 master weights whatever the mode
    ids, tgt = ids.to(device), tgt.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of(model, ids, tgt)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    return np.array(losses, dtype=np.float32)


def first_gradients(model, ids, tgt, device, bf16):
    """name -> d loss / d parameter at the start weights, fp32 or under autocast."""
    model = copy.deepcopy(model).to(device)
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
        loss = loss_of(model, ids.to(device), tgt.to(device))
    loss.backward()
    return {n: p.grad.detach().double().cpu() for n, p in model.named_parameters()}


def gradient_error(test, ref):
    """[mean over parameters of ||test - ref|| / ||ref||, fraction of elements whose sign flips
    (test * ref < 0)]: the same two numbers megac's GPU test takes of its bf16 gradients."""
    rel, flips, n = [], 0, 0
    for name, r in ref.items():
        t = test[name]
        rel.append(float((t - r).norm() / max(float(r.norm()), 1e-30)))
        flips += int((t * r < 0).sum())
        n += r.numel()
    return [float(np.mean(rel)), flips / n]


def run_fixture(name, data_dir, device, out_dir, ensemble):
    d = os.path.join(data_dir, name)
    meta = json.load(open(os.path.join(d, "meta.json")))
    r = {"fixture": name, "model": meta["model"], "attn": meta["attn"]}
    model = rebuild_model(meta)
    r["rebuild_vs_fixture_max_abs"], r["params_from_onnx"], r["params"] = \
        load_fixture_weights(model, meta, os.path.join(d, "model.onnx"))
    ids = torch.from_numpy(read_tensor(os.path.join(d, "ref/input_ids.pb")).astype(np.int64))
    tgt = torch.from_numpy(read_tensor(os.path.join(d, "ref/targets.pb")).astype(np.int64))
    ref_loss = float(read_tensor(os.path.join(d, "ref/loss.pb")))
    ref_traj = read_tensor(os.path.join(d, "ref/losses_adamw.pb")).astype(np.float32)

    with torch.no_grad():
        r["fp32_loss"] = float(loss_of(copy.deepcopy(model).to(device), ids.to(device), tgt.to(device)))
    r["fp32_loss_rel_err"] = abs(r["fp32_loss"] - ref_loss) / abs(ref_loss)
    fp32 = trajectory(model, ids, tgt, device, bf16=False)
    r["bf16_grad_error"] = gradient_error(first_gradients(model, ids, tgt, device, True),
                                          first_gradients(model, ids, tgt, device, False))
    bf16 = trajectory(model, ids, tgt, device, bf16=True)
    bf16_again = trajectory(model, ids, tgt, device, bf16=True)
    r["ref_losses_adamw"] = ref_traj.tolist()
    r["fp32_losses"] = fp32.tolist()
    r["bf16_losses"] = bf16.tolist()
    r["fp32_max_abs_vs_ref"] = float(np.abs(fp32 - ref_traj).max())
    r["bf16_max_abs_vs_ref"] = float(np.abs(bf16 - ref_traj).max())
    r["bf16_bound_for_megac"] = 1.5 * r["bf16_max_abs_vs_ref"]
    r["bf16_rerun_max_abs"] = float(np.abs(bf16 - bf16_again).max())  # run-to-run noise of the device
    # The trajectory amplifies rounding (lr 1e-2 at the edge of stability): one run's distance is
    # one draw. The ensemble re-rolls bf16 rounding by one-ulp nudges of the start weights; its
    # mean distance is PyTorch's bf16 distance without the luck of one draw. The fp32 ensemble
    # shows what the same nudges do without bf16 (the fp32 reference's own sensitivity).
    if ensemble:
        bf16_ens = np.stack([trajectory(model, ids, tgt, device, True, k + 1) for k in range(ensemble)])
        fp32_ens = np.stack([trajectory(model, ids, tgt, device, False, k + 1) for k in range(ensemble)])
        d_bf16 = np.abs(bf16_ens - ref_traj).max(axis=1)
        r["bf16_ensemble_max_abs_vs_ref"] = d_bf16.tolist()
        r["bf16_ensemble_mean"] = float(d_bf16.mean())
        r["fp32_ensemble_max_abs_vs_ref"] = np.abs(fp32_ens - ref_traj).max(axis=1).tolist()
    r["ok"] = (r["params_from_onnx"] == r["params"] and r["fp32_loss_rel_err"] <= 1e-5
               and r["fp32_max_abs_vs_ref"] <= FP32_TRAJECTORY_TOL)
    if out_dir:
        path = os.path.join(out_dir, name, "ref", "losses_adamw_bf16_autocast.pb")
        write_tensor(path, bf16, "losses_adamw_bf16_autocast")
        r["written"] = path
        write_tensor(os.path.join(out_dir, name, "ref", "grad_error_bf16_autocast.pb"), np.array(r["bf16_grad_error"]),
                     "grad_error_bf16_autocast")
        if ensemble:
            write_tensor(os.path.join(out_dir, name, "ref", "losses_adamw_bf16_autocast_ensemble.pb"), bf16_ens,
                         "losses_adamw_bf16_autocast_ensemble")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--data", default=os.path.join(REPO, "test", "data"), help="the fixtures' folder")
    ap.add_argument("--fixtures", default="", help="comma list (default: every folder with a meta.json)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--ensemble", type=int, default=8, help="one-ulp-nudged runs per mode (0: none)")
    args = ap.parse_args()

    device = torch.device(args.device)
    out_dir = args.out or os.environ.get("OUT") or (args.data if device.type == "cuda" else None)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32; autocast's bf16 GEMMs are unaffected
    torch.backends.cudnn.allow_tf32 = False
    names = [n for n in (args.fixtures.split(",") if args.fixtures else sorted(os.listdir(args.data)))
             if os.path.isfile(os.path.join(args.data, n, "meta.json"))]
    if not names:
        raise SystemExit(f"no fixture with a meta.json under {args.data}")

    env = {"torch": torch.__version__, "transformers": tf.__version__, "onnx": onnx.__version__ if onnx else None,
           "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "autocast": "bfloat16", "steps": STEPS, "lr": LR, "betas": BETAS, "eps": EPS, "weight_decay": WEIGHT_DECAY}
    print(json.dumps(env), flush=True)
    results, t0 = [], time.time()
    print(f"{'fixture':<12} {'weights':>9} {'loss rel':>9} {'fp32 vs ref':>11} {'bf16 vs ref':>11} "
          f"{'1.5x bound':>10} {'bf16 rerun':>10}  bf16 losses")
    for name in names:
        r = run_fixture(name, args.data, device, out_dir, args.ensemble)
        results.append(r)
        weights = f"{r['params_from_onnx']}/{r['params']}" + ("" if r["rebuild_vs_fixture_max_abs"] == 0 else "*")
        print(f"{name:<12} {weights:>9} {r['fp32_loss_rel_err']:9.1e} {r['fp32_max_abs_vs_ref']:11.2e} "
              f"{r['bf16_max_abs_vs_ref']:11.2e} {r['bf16_bound_for_megac']:10.2e} {r['bf16_rerun_max_abs']:10.1e}  "
              f"{' '.join(f'{x:.5f}' for x in r['bf16_losses'])}" + ("" if r["ok"] else "  CHECK FAILED"), flush=True)
        if args.ensemble:
            print(f"{'':<12} first gradients under autocast: mean relative error {r['bf16_grad_error'][0]:.2e}, "
                  f"sign flips {r['bf16_grad_error'][1]:.2e}", flush=True)
            print(f"{'':<12} {args.ensemble} nudged runs: bf16 vs ref mean {r['bf16_ensemble_mean']:.2e} "
                  f"(min {min(r['bf16_ensemble_max_abs_vs_ref']):.2e}, max {max(r['bf16_ensemble_max_abs_vs_ref']):.2e}); "
                  f"fp32 vs ref max {max(r['fp32_ensemble_max_abs_vs_ref']):.2e}", flush=True)
    print(f"(weights: parameters loaded from the fixture's ONNX / in the model; * = the rebuild differed from the "
          f"file, which was used; {time.time() - t0:.0f} s)")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "bf16_reference.json"), "w") as f:
            json.dump({"env": env, "fixtures": results}, f, indent=1)
        print(f"wrote {out_dir}/<fixture>/ref/losses_adamw_bf16_autocast.pb and {out_dir}/bf16_reference.json")
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
