"""Compiles each exported shape (bench/export_bench_model.py, e.g. into .bench/shapes/) to a plan
on this machine, no GPU needed, and prints one row per shape from `megac plan --json`: the
parameters, the host bill and its bytes per parameter, the checkpoint bytes, the largest unit,
the compile time, and whatever GPU-side figures the plan reports (issue 4's table).

Usage: plan_shapes.py MEGAC [--seq 4096] [--batch 1] [--shapes DIR] [--json OUT.json] [-- extra compile flags]
"""
import argparse
import glob
import json
import os
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


def plan_one(megac, onnx_path, batch, seq, extra, workdir):
    plan = os.path.join(workdir, os.path.basename(onnx_path) + ".plan")
    t0 = time.time()
    c = subprocess.run([megac, "compile", onnx_path, "--batch", str(batch), "--seq", str(seq), "-o", plan, *extra],
                       capture_output=True, text=True)
    compile_s = time.time() - t0
    if c.returncode != 0:
        return {"shape": os.path.basename(onnx_path), "error": (c.stderr or c.stdout).strip()[-400:]}
    p = subprocess.run([megac, "plan", "--json", plan], capture_output=True, text=True, check=True)
    os.remove(plan)  # hundreds of MB at seq 4096: the folded masks and rotary tables
    info = json.loads(p.stdout)
    info["compile_s"] = round(compile_s, 1)
    info["shape"] = os.path.basename(onnx_path)[:-len(".onnx")]
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("megac")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--shapes", default=".bench/shapes")
    ap.add_argument("--json", default=None, help="write every plan's summary here")
    ap.add_argument("extra", nargs="*", help="extra compile flags, after --")
    args = ap.parse_args()

    order = ["bench2.8b", "llama8b", "llama70b", "qwen72b", "dense120b", "llama405b"]
    files = sorted(glob.glob(os.path.join(args.shapes, "*.onnx")),
                   key=lambda f: (order.index(os.path.basename(f)[:-5]) if os.path.basename(f)[:-5] in order else 99, f))
    if not files:
        sys.exit(f"no .onnx under {args.shapes}")
    rows = []
    print(f"{'shape':<10} {'params':>16} {'host GiB':>9} {'B/param':>7} {'ckpt GiB':>8} {'largest unit':>22} "
          f"{'compile s':>9}  (batch {args.batch} x seq {args.seq})")
    with tempfile.TemporaryDirectory() as work:
        for f in files:
            r = plan_one(args.megac, f, args.batch, args.seq, args.extra, work)
            rows.append(r)
            if "error" in r:
                print(f"{r['shape']:<10} error: {r['error']}")
                continue
            flat = dict(flatten(r))
            largest = f"{flat.get('largest_unit_weights.unit', '?')} {flat.get('largest_unit_weights.bytes', 0) / GIB:.2f} GiB"
            print(f"{r['shape']:<10} {flat['parameters.total']:>16,} {flat['host_memory.total.bytes'] / GIB:9.1f} "
                  f"{flat['host_memory.bytes_per_parameter']:>7} "
                  f"{flat.get('activation_checkpoints_per_micro_batch.bytes', 0) / GIB:8.2f} {largest:>22} "
                  f"{r['compile_s']:9.1f}")
            gpu = {k: v for k, v in flat.items() if any(w in k for w in ("gpu", "predicted", "step_time", "tflops", "fits"))}
            for k, v in gpu.items():
                print(f"{'':<10}   {k}: {v}")
    if args.json:
        json.dump(rows, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
