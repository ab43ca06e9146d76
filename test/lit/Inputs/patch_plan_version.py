# Rewrites a megac plan file's format_version: the file is the 8-byte magic
# "MEGACPLN" followed by a megac.plan.Plan proto whose field 1 (varint) is
# format_version. Usage: patch_plan_version.py IN OUT VERSION (VERSION < 128).
import sys

data = bytearray(open(sys.argv[1], "rb").read())
assert data[:8] == b"MEGACPLN", "not a plan file"
assert data[8] == 0x08, "field 1 (varint) is not first"
assert data[9] < 0x80, "version takes more than one varint byte"
version = int(sys.argv[3])
assert 0 <= version < 128
data[9] = version
open(sys.argv[2], "wb").write(bytes(data))
