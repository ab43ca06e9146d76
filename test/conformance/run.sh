#!/usr/bin/env bash
# Runs the ONNX node-test conformance suite:
#   run.sh RUNNER PYTHON DATA_DIR [runner args...]
# (1) Debian's libonnx-testdata node tests (ONNX 1.12, opsets <= 17) and
# (2) opset 18..23 tests generated from the installed onnx package into
#     DATA_DIR (once; again when megac's supported ops or onnx change).
set -euo pipefail
runner=$1 python=$2 data=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
debian=/usr/share/libonnx-testdata/data/node

if [ ! -d "$debian" ]; then
  echo "conformance: $debian is missing; install libonnx-testdata (tools/setup.sh)" >&2
  exit 1
fi
if ! "$python" -c 'import onnx, numpy' 2>/dev/null; then
  echo "conformance: python onnx/numpy are missing; run tools/setup.sh" >&2
  exit 1
fi

ops=$("$runner" --list-supported-ops | tr '\n' ' ')
stamp="$ops onnx-$("$python" -c 'import onnx; print(onnx.__version__)') $(md5sum "$here/generate_opset18plus.py" | cut -d' ' -f1)"
if [ ! -f "$data/.stamp" ] || [ "$(cat "$data/.stamp")" != "$stamp" ]; then
  rm -rf "$data"
  "$python" "$here/generate_opset18plus.py" "$data" --ops "$ops"
  echo "$stamp" > "$data/.stamp"
fi

exec "$runner" --expected-failures "$here/expected_failures.txt" "$@" "$debian" "$data"
