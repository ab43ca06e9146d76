# Sourced on the GPU machine (`. bench/deepspeed_env.sh`): unpacks .whl/ (bench/fetch_deepspeed.sh)
# into /tmp/ds (the wheels) and /tmp/dssrc (DeepSpeed's source) once, and exports what
# bench/peer_deepspeed.py needs. Returns nonzero where .whl/ is missing.
[ -d .whl ] && ls .whl/deepspeed-*.tar.gz >/dev/null 2>&1 || { echo "deepspeed_env.sh: no .whl/ (run bench/fetch_deepspeed.sh here and carry .whl)" >&2; return 1; }
if [ ! -d /tmp/dssrc ]; then
  "${PY:-python3}" - <<'PYEOF'
import glob, os, tarfile, zipfile
os.makedirs("/tmp/ds", exist_ok=True)
for w in glob.glob(".whl/*.whl"):
    zipfile.ZipFile(w).extractall("/tmp/ds")
with tarfile.open(glob.glob(".whl/deepspeed-*.tar.gz")[0]) as t:
    t.extractall("/tmp/dssrc")
# The sdist's installed-info file pins the CPU accelerator: without it DS_ACCELERATOR decides.
for f in glob.glob("/tmp/dssrc/deepspeed-*/deepspeed/git_version_info_installed.py"):
    os.remove(f)
PYEOF
fi
# The ninja wheel's binary (ninja/data/bin/ninja in older wheels, ninja-V.data/scripts/ninja in
# newer): zip extraction drops its executable bit. DeepSpeed's JIT build runs it.
NINJA_BIN=$(find /tmp/ds -type f -name ninja \( -path '*/bin/*' -o -path '*/scripts/*' \) | head -1)
chmod +x "$NINJA_BIN"
mkdir -p /tmp/dsbin && ln -sf "$NINJA_BIN" /tmp/dsbin/ninja
DS_SRC=$(ls -d /tmp/dssrc/deepspeed-* | head -1)
export PATH=/tmp/dsbin:$PATH PYTHONPATH=$DS_SRC:/tmp/ds${PYTHONPATH:+:$PYTHONPATH} DS_ACCELERATOR=cuda \
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torchext}
