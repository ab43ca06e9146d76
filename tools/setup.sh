#!/usr/bin/env bash
# Installs everything megac needs to build and test on Debian 12. Idempotent.
# clang-14 and libclang-rt-14-dev (its ASan/UBSan runtimes and libFuzzer): the
# fuzz targets and the sanitizer build (test/fuzz/README.md).
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
pkgs="cmake g++ make ninja-build libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata \
  llvm-14-dev llvm-14-tools libgtest-dev googletest zlib1g-dev libtinfo-dev python3 python3-pip \
  clang-14 libclang-rt-14-dev"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
# Test tooling only: onnx (to generate opset 18-23 node tests) and numpy.
python3 -c 'import onnx, numpy' 2>/dev/null || python3 -m pip install -q onnx numpy
