#!/usr/bin/env bash
# On the GPU machine: unpacks .gpu.txz (tools/gpu-build.sh) into .gpu/ when
# .gpu/megac is missing or older than the archive.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f .gpu.txz ] && { [ ! -x .gpu/megac ] || [ .gpu.txz -nt .gpu/megac ]; }; then
  mkdir -p .gpu && xz -dc .gpu.txz | tar -C .gpu -xf -
  touch .gpu/megac
fi
[ -x .gpu/megac ] || { echo "gpu-unpack.sh: neither .gpu/megac nor .gpu.txz: run tools/gpu-build.sh here and carry .gpu.txz" >&2; exit 2; }
