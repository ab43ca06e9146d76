# Sets one integer field of a megac plan file (the 8-byte magic "MEGACPLN",
# then a megac.plan.Plan proto), walking the protobuf wire format.
# Usage: patch_plan_field.py IN OUT FIELD_PATH VALUE, FIELD_PATH being field
# numbers separated by dots, e.g. 16.10 = Plan.schedule.gpu_budget_bytes.
# Every occurrence along the path is set (VALUE >= 0).
import sys


def read_varint(b, i):
    shift = result = 0
    while True:
        c = b[i]
        i += 1
        result |= (c & 0x7F) << shift
        if not c & 0x80:
            return result, i
        shift += 7


def varint(v):
    out = bytearray()
    while True:
        c, v = v & 0x7F, v >> 7
        out.append(c | 0x80 if v else c)
        if not v:
            return bytes(out)


def fields(b):
    """(field, wire type, key bytes, value bytes incl. any length prefix)"""
    i = 0
    while i < len(b):
        key, j = read_varint(b, i)
        wire = key & 7
        if wire == 0:
            _, k = read_varint(b, j)
        elif wire == 1:
            k = j + 8
        elif wire == 2:
            n, m = read_varint(b, j)
            k = m + n
        elif wire == 5:
            k = j + 4
        else:
            raise SystemExit("unsupported wire type %d" % wire)
        yield key >> 3, wire, b[i:j], b[j:k]
        i = k


def patch(msg, path, value):
    out, found = bytearray(), False
    for field, wire, key, body in fields(msg):
        if field == path[0] and len(path) == 1 and wire == 0:
            out += key + varint(value)
            found = True
        elif field == path[0] and len(path) > 1 and wire == 2:
            _, m = read_varint(body, 0)
            inner = patch(body[m:], path[1:], value)
            out += key + varint(len(inner)) + inner
            found = True
        else:
            out += key + body
    if not found and len(path) == 1:
        out += varint(path[0] << 3) + varint(value)
    return bytes(out)


data = open(sys.argv[1], "rb").read()
assert data[:8] == b"MEGACPLN", "not a plan file"
path = [int(f) for f in sys.argv[3].split(".")]
value = int(sys.argv[4])
assert value >= 0
open(sys.argv[2], "wb").write(data[:8] + patch(data[8:], path, value))
