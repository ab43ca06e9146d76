# Sets one integer field of a megac plan file's Plan message, walking the
# protobuf wire format, and reseals the file's checksum (megac_files.py).
# Usage: patch_plan_field.py IN OUT FIELD_PATH VALUE, FIELD_PATH being field
# numbers separated by dots, e.g. 16.10 = Plan.schedule.gpu_budget_bytes.
# Every occurrence along the path is set (VALUE >= 0).
import sys

import megac_files as mf

version, payload = mf.read_plan(sys.argv[1])
path = [int(f) for f in sys.argv[3].split(".")]
value = int(sys.argv[4])
assert value >= 0
mf.write_plan(sys.argv[2], mf.patch(payload, path, value), version)
