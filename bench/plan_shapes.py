"""Compiles each exported shape (bench/export_bench_model.py, e.g. into .bench/shapes/) to a plan
on this machine, no GPU needed, and prints one row per shape from `megac plan --json`: the
parameters, the host bill and its bytes per parameter, the checkpoint bytes, the largest unit,
the compile time, the largest batch that fits at --seq on the plan's GPU budget, and whatever
GPU-side figures the plan reports (issue 4's table).

The largest batch ("max batch") is megac's own answer, from its planner: the GPU peak of a plan
compiled at each batch tried, against the budget the plan was compiled for (--gpu-mem, default
the profile's usable memory), the test `megac compile` applies (codegen/Compile.cpp). Where the
plan at --batch is already over budget, it is the "largest batch that fits at seq S" line of
megac's error. Otherwise the batch is doubled until the plan no longer fits, then bisected
(megac's largestFitting: the peak is taken to grow with the batch). Those compiles do not use the
exported file as it is: the exporter's causal mask is [batch, 1, seq, seq] and every layer
folds it to a float mask of that size at compile time, which costs the compile about
layers x 4 x batch x seq^2 bytes of host memory (2 GiB per batch for Llama-3.1-8B at seq
4096), so a compile at a large batch does not fit this kind of machine. They compile a copy in
which that mask is the same causal pattern built at [1, 1, seq, seq] (broadcast over the batch),
which fuse-attention turns into the same is_causal Attention; the copy's plan summary at
--batch is checked equal to the original's (every field but the file names) before its
figures are used, and the search is skipped with the reason if it is not. Needs the onnx
package (--no-max-batch: not needed).

Caveat printed with the figure: megac folds no constant of more than 2^28 elements
(passes/Pass.h foldLimit), and the exported mask has batch x seq^2 of them, so at batch x seq^2
> 2^28 (batch > 16 at seq 4096) the original file's attention is not fused at all (the scores
are materialized); a max batch past that bound holds for the copy, not for the file as exported.

Usage: plan_shapes.py MEGAC [--seq 4096] [--batch 1] [--shapes DIR] [--json OUT.json] [--no-max-batch]
                      [-- extra compile flags]
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

GIB = 1 << 30
FOLD_LIMIT = 1 << 28  # passes/Pass.h: PassOptions::foldLimit


def flatten(x, prefix=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else k)
    elif not isinstance(x, list):
        yield prefix, x


def compile_plan(megac, onnx_path, batch, seq, extra, workdir, tag=""):
    """(summary from `megac plan --json` or None, compile stderr/stdout, seconds)."""
    plan = os.path.join(workdir, os.path.basename(onnx_path) + tag + ".plan")
    t0 = time.time()
    c = subprocess.run([megac, "compile", onnx_path, "--batch", str(batch), "--seq", str(seq), "-o", plan, *extra],
                       capture_output=True, text=True)
    secs = time.time() - t0
    if c.returncode != 0:
        return None, (c.stderr or c.stdout or f"megac exited with status {c.returncode} (killed for memory?)"), secs
    p = subprocess.run([megac, "plan", "--json", plan], capture_output=True, text=True, check=True)
    os.remove(plan)  # hundreds of MB at seq 4096: the folded masks and rotary tables
    return json.loads(p.stdout), "", secs


def plan_one(megac, onnx_path, batch, seq, extra, workdir):
    info, err, compile_s = compile_plan(megac, onnx_path, batch, seq, extra, workdir)
    if info is None:
        return {"shape": os.path.basename(onnx_path), "error": err.strip()[-400:], "error_full": err}
    info["compile_s"] = round(compile_s, 1)
    info["shape"] = os.path.basename(onnx_path)[:-len(".onnx")]
    return info


def batch_free_mask_copy(onnx_path, out_path):
    """Writes a copy of the exported file whose attention mask is the causal pattern at [1, 1, S, S]
    instead of the exporter's [B, 1, S, S] (the module docstring says why). Returns None, or why not."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(onnx_path, load_external_data=False)
    g = m.graph
    consts = {i.name: i for i in g.initializer}
    consts.update({n.output[0]: a.t for n in g.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"})

    def scalar(name):
        t = consts.get(name)
        if t is None:
            return None
        a = numpy_helper.to_array(t)
        return float(a.reshape(-1)[0]) if a.size == 1 else None

    # The mask: the condition of every Where(mask, 0, fill <= -1e30) (sdpa's bool mask to additive).
    masks = set()
    for n in g.node:
        if n.op_type == "Where" and scalar(n.input[1]) == 0 and (scalar(n.input[2]) or 0) <= -1e30:
            masks.add(n.input[0])
    if len(masks) != 1:
        return f"expected one shared attention mask, found {len(masks)}"
    mask = masks.pop()
    ids = g.input[0].name
    i64 = lambda name, v: helper.make_node("Constant", [], [name], value=helper.make_tensor(name, onnx.TensorProto.INT64, [len(v)] if isinstance(v, list) else [], v if isinstance(v, list) else [v]))
    new = [
        helper.make_node("Shape", [ids], ["bfm_seq1"], start=1, end=2),
        helper.make_node("Squeeze", ["bfm_seq1"], ["bfm_seq"]),
        i64("bfm_zero", 0), i64("bfm_one", 1), i64("bfm_axes_q", [0, 1, 3]), i64("bfm_axes_k", [0, 1, 2]),
        helper.make_node("Range", ["bfm_zero", "bfm_seq", "bfm_one"], ["bfm_pos"]),
        helper.make_node("Unsqueeze", ["bfm_pos", "bfm_axes_q"], ["bfm_q"]),  # [1, 1, S, 1]
        helper.make_node("Unsqueeze", ["bfm_pos", "bfm_axes_k"], ["bfm_k"]),  # [1, 1, 1, S]
        helper.make_node("LessOrEqual", ["bfm_k", "bfm_q"], ["bfm_mask"]),  # keep key j <= query i
    ]
    nodes = new + list(g.node)
    for n in nodes:
        for k, x in enumerate(n.input):
            if x == mask:
                n.input[k] = "bfm_mask"
    # Drop what only the old mask used (megac's specialize would still fold it at [B, 1, S, S]).
    live = {o.name for o in g.output}
    keep = []
    for n in reversed(nodes):
        if any(o in live for o in n.output):
            keep.append(n)
            live.update(x for x in n.input if x)
    del g.node[:]
    g.node.extend(reversed(keep))
    onnx.save(m, out_path)
    return None


def strip_gpu_mem(extra):
    out, skip = [], False
    for a in extra:
        if skip:
            skip = False
        elif a in ("--gpu-mem", "-gpu-mem"):
            skip = True
        elif not a.startswith(("--gpu-mem=", "-gpu-mem=")):
            out.append(a)
    return out


def comparable(info):
    return {k: v for k, v in info.items() if k not in ("model", "plan", "compile_s", "shape")}


def max_batch(megac, onnx_path, row, batch, seq, extra, workdir, log):
    """{"max_batch": N, "seconds": s, "compiles": k, "how": ..., ["note": ...]} or {"error": ...}."""
    t0 = time.time()
    if "error" in row:
        m = re.search(r"largest batch that fits at seq (\d+): (\d+|none)", row.get("error_full", ""))
        if not m:
            return {"error": "compile failed, and not over the GPU budget"}
        n = 0 if m.group(2) == "none" else int(m.group(2))
        return {"max_batch": n, "seconds": 0.0, "compiles": 0, "how": "megac's over-budget error"}
    budget = row["gpu_memory"]["budget"]["bytes"]
    proxy = os.path.join(workdir, os.path.basename(onnx_path)[:-5] + ".bfm.onnx")
    try:
        why = batch_free_mask_copy(onnx_path, proxy)
    except ImportError as e:
        return {"error": f"the batch-free copy needs the onnx package ({e})"}
    if why:
        return {"error": "no batch-free copy: " + why}
    flags = strip_gpu_mem(extra) + ["--gpu-mem", "1e9"]  # never over: the budget is compared here
    compiles = 0

    def peak(b):
        nonlocal compiles
        info, err, secs = compile_plan(megac, proxy, b, seq, flags, workdir, ".bfm")
        compiles += 1
        if info is None:
            raise RuntimeError(f"batch {b}: {err.strip()[-300:]}")
        log(f"    batch {b}: GPU peak {info['gpu_memory']['peak']['bytes'] / GIB:.2f} GiB ({secs:.0f} s)")
        return info

    try:
        same = peak(batch)
        a, b = comparable(same), comparable(row)
        a["gpu_memory"] = {k: v for k, v in a["gpu_memory"].items() if k != "budget"}
        b["gpu_memory"] = {k: v for k, v in b["gpu_memory"].items() if k != "budget"}
        if a != b:
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            return {"error": f"the batch-free copy plans differently at batch {batch}: {', '.join(diff)}"}
        lo, hi = batch, None  # lo fits (the row's plan did), hi does not
        while hi is None:
            b = lo * 2
            if peak(b)["gpu_memory"]["peak"]["bytes"] <= budget:
                lo = b
            else:
                hi = b
        while hi - lo > 1:
            mid = lo + (hi - lo) // 2
            if peak(mid)["gpu_memory"]["peak"]["bytes"] <= budget:
                lo = mid
            else:
                hi = mid
    except RuntimeError as e:
        return {"error": str(e)}
    r = {"max_batch": lo, "seconds": round(time.time() - t0, 1), "compiles": compiles,
         "how": "planner peak vs budget, batch-free mask copy"}
    if lo * seq * seq > FOLD_LIMIT:
        r["note"] = (f"batch x seq^2 > 2^28: the file as exported does not fold its mask at this batch, "
                     f"so its attention is not fused; largest batch with a folded mask: {FOLD_LIMIT // (seq * seq)}")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("megac")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--shapes", default=".bench/shapes")
    ap.add_argument("--json", default=None, help="write every plan's summary here")
    ap.add_argument("--no-max-batch", action="store_true", help="skip the largest-batch search")
    ap.add_argument("extra", nargs="*", help="extra compile flags, after --")
    args = ap.parse_args()

    order = ["bench2.8b", "llama8b", "llama70b", "qwen72b", "dense120b", "llama405b"]
    files = sorted(glob.glob(os.path.join(args.shapes, "*.onnx")),
                   key=lambda f: (order.index(os.path.basename(f)[:-5]) if os.path.basename(f)[:-5] in order else 99, f))
    if not files:
        sys.exit(f"no .onnx under {args.shapes}")
    rows = []
    print(f"{'shape':<10} {'params':>16} {'host GiB':>9} {'B/param':>7} {'ckpt GiB':>8} {'largest unit':>22} "
          f"{'compile s':>9} {'max batch':>9}  (batch {args.batch} x seq {args.seq})", flush=True)
    log = lambda s: print(s, file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as work:
        for f in files:
            r = plan_one(args.megac, f, args.batch, args.seq, args.extra, work)
            rows.append(r)
            if not args.no_max_batch:
                log(f"{os.path.basename(f)}: largest batch at seq {args.seq}")
                r["max_batch"] = max_batch(args.megac, f, r, args.batch, args.seq, args.extra, work, log)
            mb = r.get("max_batch", {})
            mb_text = str(mb["max_batch"]) + ("*" if "note" in mb else "") if "max_batch" in mb else "?" if mb else "-"
            if "error" in r:
                print(f"{r['shape']:<10} error: {r['error']}")
                if mb:
                    print(f"{'':<10}   max batch: {mb_text} {mb.get('error', '')}")
                r.pop("error_full", None)
                continue
            flat = dict(flatten(r))
            largest = f"{flat.get('largest_unit_weights.unit', '?')} {flat.get('largest_unit_weights.bytes', 0) / GIB:.2f} GiB"
            print(f"{r['shape']:<10} {flat['parameters.total']:>16,} {flat['host_memory.total.bytes'] / GIB:9.1f} "
                  f"{flat['host_memory.bytes_per_parameter']:>7} "
                  f"{flat.get('activation_checkpoints_per_micro_batch.bytes', 0) / GIB:8.2f} {largest:>22} "
                  f"{r['compile_s']:9.1f} {mb_text:>9}", flush=True)
            if mb:
                print(f"{'':<10}   max_batch: {json.dumps(mb)}")
            gpu = {k: v for k, v in flat.items() if any(w in k for w in ("gpu", "predicted", "step_time", "step_seconds", "bottleneck", "tflops", "fits"))}
            for k, v in gpu.items():
                print(f"{'':<10}   {k}: {v}")
    if args.json:
        json.dump(rows, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
