#!/usr/bin/env bash
# Installs the dependencies, builds megac and runs every test (CPU; GPU tests
# skip with a message where no GPU exists).
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build
ctest --test-dir build --output-on-failure
