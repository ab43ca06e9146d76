# Rewrites a megac plan file's format version (its header's and the Plan's
# field 1, format_version), resealing the checksum (megac_files.py).
# Usage: patch_plan_version.py IN OUT VERSION [--legacy]; --legacy writes the
# layout of formats 1-3 (the magic, then the Plan; no header).
import sys

import megac_files as mf

_, payload = mf.read_plan(sys.argv[1])
version = int(sys.argv[3])
assert version >= 0
mf.write_plan(sys.argv[2], mf.patch(payload, [1], version), version, legacy="--legacy" in sys.argv[4:])
