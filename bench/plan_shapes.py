"""Compiles each exported shape (tools/export_shapes_only.py --preset NAME, e.g. into .bench/shapes/) to a plan
on this machine, no GPU needed, and prints one row per shape from `megac plan --json`: the
parameters, the host bill and its bytes per parameter, the checkpoint bytes, the largest unit,
the compile time, the largest batch that fits at --seq on the plan's GPU budget, and whatever
GPU-side figures the plan reports (issue 4's table).

The largest batch ("max batch") is megac's own answer, from its planner: the GPU peak of a plan
compiled at each batch tried, against the budget the plan was compiled for (--gpu-mem, default
the profile's usable memory), the test `megac compile` applies (driver/Compile.cpp). Where the
plan at --batch is already over budget, it is the "largest batch that fits at seq S" line of
megac's error. Otherwise the batch is doubled until the plan no longer fits, then bisected
(megac's largestFitting: the peak is taken to grow with the batch), compiling the exported file
itself at each batch tried: megac folds the exporter's [batch, 1, seq, seq] causal mask once for
all layers and, past its fold limit, as a small constant under one Expand, so a compile at a
large batch stays small (Llama-3.1-8B at batch 17 x 4096: 0.3 GB) and keeps attention fused.

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


def max_batch(megac, onnx_path, row, batch, seq, extra, workdir, log):
    """{"max_batch": N, "seconds": s, "compiles": k, "how": ...} or {"error": ...}."""
    t0 = time.time()
    if "error" in row:
        m = re.search(r"largest batch that fits at seq (\d+): (\d+|none)", row.get("error_full", ""))
        if not m:
            return {"error": "compile failed, and not over the GPU budget"}
        n = 0 if m.group(2) == "none" else int(m.group(2))
        return {"max_batch": n, "seconds": 0.0, "compiles": 0, "how": "megac's over-budget error"}
    budget = row["gpu_memory"]["budget"]["bytes"]
    flags = strip_gpu_mem(extra) + ["--gpu-mem", "1e9"]  # never over: the budget is compared here
    compiles = 0

    def peak(b):
        nonlocal compiles
        info, err, secs = compile_plan(megac, onnx_path, b, seq, flags, workdir, ".max")
        compiles += 1
        if info is None:
            raise RuntimeError(f"batch {b}: {err.strip()[-300:]}")
        log(f"    batch {b}: GPU peak {info['gpu_memory']['peak']['bytes'] / GIB:.2f} GiB ({secs:.0f} s)")
        return info

    try:
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
    return {"max_batch": lo, "seconds": round(time.time() - t0, 1), "compiles": compiles,
            "how": "planner peak vs budget"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("megac")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--shapes", default=".bench/shapes")
    ap.add_argument("--json", default=None, help="write every plan's summary here")
    ap.add_argument("--no-max-batch", action="store_true", help="skip the largest-batch search")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.extra = extra  # after "--", anywhere: argparse would take them only before the options

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
            mb_text = str(mb["max_batch"]) if "max_batch" in mb else "?" if mb else "-"
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
