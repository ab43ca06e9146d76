#!/usr/bin/env bash
# Installs the dependencies, builds megac, and trains the bundled tiny Llama
# (test/data/llama, 125k parameters, byte-level vocabulary) on a text every
# Debian system has, on the CPU: a few hundred steps, under two minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build megac
mkdir -p runs/quickstart
exec ./build/megac train test/data/llama/model.onnx --batch 8 --seq 64 \
  --text /usr/share/common-licenses/GPL-3 --steps 300 \
  --lr 3e-3 --warmup 20 --schedule cosine --min-lr 3e-4 --weight-decay 0.1 \
  --checkpoint-dir runs/quickstart/checkpoints --checkpoint-every 100 \
  --log runs/quickstart/metrics.jsonl --device cpu
