#!/usr/bin/env bash
# Installs everything megac needs to build and test on Debian 12. Idempotent.
# clang-14 and libclang-rt-14-dev (its ASan/UBSan runtimes and libFuzzer): the
# fuzz targets and the sanitizer build (test/fuzz/README.md). chromium: the
# lit test that renders `megac plan --html` headless (about a minute to install).
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
pkgs="cmake g++ make ninja-build libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata \
  llvm-14-dev llvm-14-tools libgtest-dev googletest zlib1g-dev libtinfo-dev python3 python3-pip \
  clang-14 libclang-rt-14-dev chromium"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
# Test tooling only: onnx (to generate opset 18-23 node tests) and numpy.
python3 -c 'import onnx, numpy' 2>/dev/null || python3 -m pip install -q onnx numpy
# tools/prepare_data.py (and its lit tests): tokenizers, and transformers for chat templates
# (with jinja2, which transformers leaves optional); no torch. Pinned; installed when any is
# missing or at another version.
pins="tokenizers==0.23.3 transformers==5.25.0 jinja2==3.1.6"
python3 - $pins <<'EOF' 2>/dev/null || python3 -m pip install -q $pins
import importlib.metadata as md, sys
sys.exit(any(md.version(n) != v for n, v in (p.split("==") for p in sys.argv[1:])))
EOF
