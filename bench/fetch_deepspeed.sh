#!/usr/bin/env bash
# Here, on a machine with PyPI: DeepSpeed 0.19.8's source and the wheels it needs for the GPU
# machine's Python 3.12 on x86_64, into .whl/ (ignored by git; about 10 MB), for a device call to
# carry. There, bench/deepspeed_env.sh unpacks them (bench/peer_deepspeed.py says why it is done so).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download -q --no-deps --no-binary :all: -d .whl deepspeed==0.19.8
plat=(--only-binary :all: --python-version 3.12 --implementation cp --abi cp312
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)
python3 -m pip download -q --no-deps "${plat[@]}" -d .whl hjson msgpack ninja py-cpuinfo pydantic \
  annotated-types typing-inspection nvidia-ml-py psutil einops tqdm "typing-extensions>=4.12"
# pydantic pins its core exactly: read the pin from the wheel just fetched.
core=$(python3 - <<'PY'
import glob, re, zipfile
z = zipfile.ZipFile(sorted(glob.glob(".whl/pydantic-[0-9]*.whl"))[-1])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
for line in z.read(meta).decode().splitlines():
    m = re.match(r"Requires-Dist: pydantic-core\s*==\s*([0-9.]+)", line)
    if m:
        print(m.group(1))
PY
)
python3 -m pip download -q --no-deps "${plat[@]}" -d .whl "pydantic-core==$core"
ls .whl && du -sh .whl
