# Flips one bit of a float inside a plan's embedded constants, leaving the
# file's header (and its checksum) as they were: the first 1.0f of the first
# run of eight, a rotary cos cache's row 0, becomes 1.5f (0x3f800000 ->
# 0x3fc00000). Usage: flip_plan_constant.py IN OUT
import sys

data = bytearray(open(sys.argv[1], "rb").read())
i = data.find(b"\x00\x00\x80\x3f" * 8, 8)
assert i > 0, "no run of 1.0f in the plan"
data[i + 2] ^= 0x40
open(sys.argv[2], "wb").write(bytes(data))
print("flipped a bit at byte %d of %d" % (i + 2, len(data)))
