#!/usr/bin/env python3
"""Checks megac's layering by reading the includes. Every source directory
belongs to one library (CMakeLists.txt builds one per name below); a file may
include (besides the standard library, LLVM, protobuf, CUDA and the generated
onnx.pb.h / plan.pb.h) its own directory, the directories of the libraries
its library depends on (directly or through others), and, inside a library of
several directories, those INSIDE allows. Data flows one way
(docs/design.md, "The libraries"); an include against it is an error naming
the file, the line and the include, and so is a source directory the table
does not name, or a CMakeLists.txt megac_library that links against the graph.

    tools/check_layers.py [ROOT]        exit 1 on any violation
"""
import os
import re
import sys

# Directory -> library.
LIBRARY = {
    "runtime/core": "core",  # tensors, dtypes, file formats (ONNX tensors, safetensors)
    "runtime/cpu": "kernels",  # the CPU op semantics: constant folding and the CPU runtime
    "runtime/plan": "plan",  # the plan format, its I/O and checker, what reading a plan needs
    "runtime": "runtime",  # ProgramRunner: the CPU program interpreter
    "runtime/train": "runtime",
    "runtime/stream": "runtime",
    "runtime/cuda": "cuda",
    "runtime/weights": "weights",  # the weight files' readers the tools inject, the Hugging Face export
    "ir": "ir",
    "ir/ops": "ir",
    "frontend": "frontend",
    "frontend/import": "frontend",
    "passes": "passes",
    "passes/autodiff": "passes",
    "codegen": "codegen",  # plan building, its policies, the memory planner and the cost model
    "driver": "driver",  # compileForTraining: ONNX file -> checked plan
    "tools/inspect": "inspect",  # the plan report, the HTML timeline, the schedule dump
    "tools/megac": "tools",
}

# Library -> the libraries it may include directly; what they may include, it
# may too. The graph of issue 25: core <- kernels <- ir <- frontend, passes;
# codegen -> passes, ir, plan; runtime -> plan, kernels, core; tools -> all.
DEPENDS = {
    "core": set(),
    "kernels": {"core"},
    "ir": {"kernels"},
    "frontend": {"ir"},
    "passes": {"ir"},
    # The plan's sizes follow the kernels' shape rules (NormAttentionShapes,
    # LinearCrossEntropyChunks): the workspace a plan budgets is the one the
    # kernels carve, so both read one header.
    "plan": {"kernels", "core"},
    "codegen": {"passes", "ir", "plan"},
    "driver": {"codegen", "frontend"},
    "runtime": {"plan", "kernels", "core"},
    "cuda": {"runtime"},
    # The readers know the formats; the runtime reads through
    # runtime/train/WeightReader.h and knows none of them.
    "weights": {"runtime"},
    "inspect": {"codegen", "plan"},
    "tools": {"driver", "inspect", "runtime", "cuda", "weights"},
}

# Inside a library of several directories: which others each may include
# (the rest of its library is off limits).
INSIDE = {
    "ir/ops": {"ir"},
    "frontend/import": {"frontend"},
    # A pass and the gradient rules it applies call each other.
    "passes": {"passes/autodiff"},
    "passes/autodiff": {"passes"},
    # The interpreter <- the trainer <- the stream executor.
    "runtime/train": {"runtime"},
    "runtime/stream": {"runtime", "runtime/train"},
}

# Where sources live: every directory under these must be in LIBRARY. (test/
# and bench/ are programs over the libraries, like tools/megac: not checked.)
SOURCE_ROOTS = ("runtime", "ir", "frontend", "passes", "codegen", "driver", "tools")
SOURCE_EXT = (".h", ".cpp", ".cu", ".cuh")
EXTERNAL = ("llvm/", "google/", "onnx.pb.h", "plan.pb.h", "cuda", "cudnn", "cublas")
INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')


def closure(lib):
    seen, todo = set(), [lib]
    while todo:
        for d in DEPENDS[todo.pop()]:
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def allowed(d):
    libs = closure(LIBRARY[d])
    dirs = {x for x, lib in LIBRARY.items() if lib in libs}
    return dirs | INSIDE.get(d, set())


# CMakeLists.txt's megac_library(NAME SOURCES ... LINKS ...) lines: a library
# may link only what the graph lets it include.
CMAKE_LIBRARY = re.compile(r"^megac_library\(megac_(\w+) SOURCES .*? LINKS (.*)\)", re.M)


def check_cmake(root):
    bad = 0
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        text = f.read()
    for lib, links in CMAKE_LIBRARY.findall(text):
        if lib not in DEPENDS:
            print(f"CMakeLists.txt: megac_{lib} is no library of tools/check_layers.py DEPENDS")
            bad += 1
            continue
        for link in links.split():
            dep = link[len("megac_"):] if link.startswith("megac_") else None
            if dep in DEPENDS and dep not in closure(lib):
                print(f"CMakeLists.txt: megac_{lib} links {link}: {lib} may not depend on {dep}")
                bad += 1
    return bad


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad = check_cmake(root)
    files = 0
    for top in SOURCE_ROOTS:
        for path, _, names in os.walk(os.path.join(root, top)):
            d = os.path.relpath(path, root)
            if d not in LIBRARY and any(n.endswith(SOURCE_EXT) for n in names):
                print(f"{d}: holds sources but belongs to no library (tools/check_layers.py LIBRARY)")
                bad += 1
    for d in sorted(LIBRARY):
        ok = allowed(d)
        path = os.path.join(root, d)
        for name in sorted(os.listdir(path)):
            if not name.endswith(SOURCE_EXT):
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
                    if target not in ok:
                        lib = LIBRARY.get(target, "no library")
                        print(f"{d}/{name}:{n}: includes \"{inc}\": {d} ({LIBRARY[d]}) may not depend on {target} ({lib})")
                        bad += 1
    print(f"check_layers: {files} files, {bad} includes against the layering")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
