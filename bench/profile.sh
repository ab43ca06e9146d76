#!/usr/bin/env bash
# Measures this GPU machine for megac's cost model and compares megac's CPU
# AdamW with PyTorch's on the same machine, in one run. Usage:
#   bench/profile.sh BUILD_DIR [OUT_PROFILE]
set -euo pipefail
build=${1:-build}
out=${2:-}
"$build/megac_profile" $out
if python3 -c 'import torch' 2>/dev/null; then
  python3 "$(dirname "$0")/adamw_peer.py" $((1 << 27))
else
  echo "# torch not installed: no PyTorch AdamW peer"
fi
