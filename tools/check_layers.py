#!/usr/bin/env python3
"""Checks megac's layering by reading the includes: each source directory may
include (besides itself, the standard library, LLVM, protobuf and the
generated onnx.pb.h / plan.pb.h) only the directories this table allows.
Data flows one way (docs/design.md, "The libraries"); an include against it
is an error naming the file, the line and the include.

    tools/check_layers.py [ROOT]        exit 1 on any violation

The allowances marked "today" are the blurs docs/design.md lists (issue 25's
layering work removes them); nothing else may join them unnoticed.
"""
import os
import re
import sys

CORE = "runtime/core"
KERNELS = "runtime/cpu"
PLAN = "runtime/plan"
RUNNER = "runtime"  # runtime/ProgramRunner.{h,cpp}: the CPU program interpreter
TRAIN = "runtime/train"
STREAM = "runtime/stream"
CUDA = "runtime/cuda"

ALLOWED = {
    CORE: set(),
    KERNELS: {CORE},
    PLAN: {CORE, KERNELS},  # shapes and rules both the plan and the kernels follow
    RUNNER: {CORE, KERNELS, PLAN},
    TRAIN: {CORE, KERNELS, PLAN, RUNNER},
    STREAM: {CORE, KERNELS, PLAN, RUNNER, TRAIN},
    CUDA: {CORE, KERNELS, PLAN, RUNNER, TRAIN},
    "ir": {CORE, KERNELS},  # today: constant folding runs the CPU kernels
    "ir/ops": {"ir", CORE, KERNELS},
    "frontend": {"ir", CORE},  # today: ONNX tensors are parsed in runtime/core
    "frontend/import": {"frontend", "ir", CORE},
    "passes": {"ir", "ir/ops", "passes/autodiff", CORE, KERNELS},
    "passes/autodiff": {"ir", "ir/ops", "passes", CORE},
    # today: the host budget uses runtime/train's bill
    "codegen": {"ir", "ir/ops", "passes", "passes/autodiff", CORE, KERNELS, PLAN, TRAIN},
    # the compiler driver: frontend, the pipelines, codegen and its policies
    "driver": {"codegen", "frontend", "ir", "passes", CORE, PLAN},
    "tools/megac": {"driver", "codegen", "frontend", "ir", "passes", CORE, KERNELS, PLAN, RUNNER, TRAIN, CUDA},
}
EXTERNAL = ("llvm/", "google/", "onnx.pb.h", "plan.pb.h", "cuda", "cudnn", "cublas")
INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad = 0
    files = 0
    for d in sorted(ALLOWED):
        path = os.path.join(root, d)
        for name in sorted(os.listdir(path)):
            if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            files += 1
            with open(os.path.join(path, name), errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or m.group(1).startswith(EXTERNAL):
                        continue
                    inc = m.group(1)
                    target = os.path.dirname(inc)
                    if target == "" or target == d:
                        continue  # same directory (or a generated header beside it)
                    if target not in ALLOWED[d]:
                        print(f"{d}/{name}:{n}: includes \"{inc}\": {d} may not depend on {target}")
                        bad += 1
    print(f"check_layers: {files} files, {bad} includes against the layering")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
