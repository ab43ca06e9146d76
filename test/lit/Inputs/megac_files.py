"""megac's plan and checkpoint files for tests, read and written without megac:
a protobuf wire-format walker, the file headers, and xxHash64 in Python.

Plan file (format 4 on): b"MEGACPLN", then version u32, CRC-32 of the payload
u32, payload bytes u64 (little-endian), then the Plan message. Formats 1-3: the
magic, then the Plan.

checkpoint.meta (format 2 on): b"MEGACCKP", then version u32, payload bytes u32,
xxHash64 of the payload u64, then the CheckpointMeta message. Format 1: the
magic, then the message. Each array file's checksum (CheckpointMeta field 13)
is the xxHash64 of the little-endian xxHash64s of its chunks of
checksum_chunk_bytes (field 14).
"""
import struct
import zlib

# --- xxHash64 (the reference algorithm, as llvm::xxHash64 computes it) ---

_M = (1 << 64) - 1
_P1 = 11400714785074694791
_P2 = 14029467366897019727
_P3 = 1609587929392839161
_P4 = 9650029242287828579
_P5 = 2870177450012600261


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc, lane):
    acc = (acc + lane * _P2) & _M
    return (_rotl(acc, 31) * _P1) & _M


def _merge(acc, val):
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _M


def xxh64(data, seed=0):
    data = bytes(data)
    n = len(data)
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M
        stripes = n // 32
        for a, b, c, d in struct.iter_unpack("<4Q", data[:stripes * 32]):
            v1 = _rotl((v1 + a * _P2) & _M, 31) * _P1 & _M
            v2 = _rotl((v2 + b * _P2) & _M, 31) * _P1 & _M
            v3 = _rotl((v3 + c * _P2) & _M, 31) * _P1 & _M
            v4 = _rotl((v4 + d * _P2) & _M, 31) * _P1 & _M
        i = stripes * 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        (k,) = struct.unpack_from("<Q", data, i)
        h ^= _round(0, k)
        h = (_rotl(h, 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h ^= (k * _P1) & _M
        h = (_rotl(h, 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M
        h = (_rotl(h, 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    h ^= h >> 32
    return h


def array_checksum(data, chunk):
    hashes = b"".join(struct.pack("<Q", xxh64(data[i:i + chunk])) for i in range(0, len(data), chunk))
    return xxh64(hashes)


# --- protobuf wire format ---


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


def value(wire, body):
    """A field's value: an int (varint, fixed64, fixed32) or the bytes of a
    length-delimited one."""
    if wire == 0:
        return read_varint(body, 0)[0]
    if wire == 1:
        return struct.unpack("<Q", body)[0]
    if wire == 5:
        return struct.unpack("<I", body)[0]
    n, m = read_varint(body, 0)
    return body[m:m + n]


def patch(msg, path, val):
    """Sets the varint field at `path` (field numbers, outermost first) to val
    (every occurrence along the path); adds it where absent."""
    out, found = bytearray(), False
    for field, wire, key, body in fields(msg):
        if field == path[0] and len(path) == 1 and wire == 0:
            out += key + varint(val)
            found = True
        elif field == path[0] and len(path) > 1 and wire == 2:
            _, m = read_varint(body, 0)
            inner = patch(body[m:], path[1:], val)
            out += key + varint(len(inner)) + inner
            found = True
        else:
            out += key + body
    if not found and len(path) == 1:
        out += varint(path[0] << 3) + varint(val)
    return bytes(out)


def drop(msg, numbers):
    """msg without the top-level fields numbered in `numbers`."""
    return b"".join(key + body for field, _, key, body in fields(msg) if field not in numbers)


# --- plan files ---

PLAN_MAGIC = b"MEGACPLN"


def read_plan(path):
    """(format version, payload); checks the header's size and CRC."""
    data = open(path, "rb").read()
    assert data[:8] == PLAN_MAGIC, "not a plan file"
    if data[8] == 0x08:  # formats 1-3: no header
        return read_varint(data, 9)[0], data[8:]
    version, crc, size = struct.unpack_from("<IIQ", data, 8)
    payload = data[24:]
    assert size == len(payload), "truncated plan"
    assert crc == zlib.crc32(payload), "plan checksum mismatch"
    return version, payload


def write_plan(path, payload, version, legacy=False):
    """With legacy, the layout of formats 1-3 (no header)."""
    if legacy:
        data = PLAN_MAGIC + payload
    else:
        data = PLAN_MAGIC + struct.pack("<IIQ", version, zlib.crc32(payload), len(payload)) + payload
    open(path, "wb").write(data)


# --- checkpoints ---

META_MAGIC = b"MEGACCKP"


def read_meta(path):
    """(format version, payload, header ok): header ok is whether the
    header's size and xxHash64 match the payload (True for format 1)."""
    data = open(path, "rb").read()
    assert data[:8] == META_MAGIC, "not a checkpoint"
    if data[8] == 0x08:  # format 1: no header
        return 1, data[8:], True
    version, size, h = struct.unpack_from("<IIQ", data, 8)
    payload = data[24:]
    return version, payload, size == len(payload) and h == xxh64(payload)


def write_meta(path, payload, version, legacy=False):
    if legacy:
        data = META_MAGIC + payload
    else:
        data = META_MAGIC + struct.pack("<IIQ", version, len(payload), xxh64(payload)) + payload
    open(path, "wb").write(data)


def meta_params(payload):
    """[(name, shape, host offset)] of a CheckpointMeta payload."""
    out = []
    for field, wire, _, body in fields(payload):
        if field != 7:
            continue
        name, shape, offset = "", [], 0
        for f, w, _, b in fields(value(wire, body)):
            if f == 1:
                name = value(w, b).decode()
            elif f == 2 and w == 2:  # packed
                pv, j = value(w, b), 0
                while j < len(pv):
                    d, j = read_varint(pv, j)
                    shape.append(d)
            elif f == 2:
                shape.append(value(w, b))
            elif f == 3:
                offset = value(w, b)
        out.append((name, shape, offset))
    return out


def meta_checksums(payload):
    """({file: xxh64}, chunk bytes) of a CheckpointMeta payload."""
    sums, chunk = {}, 0
    for field, wire, _, body in fields(payload):
        if field == 13:
            f = {n: (w, b) for n, w, _, b in fields(value(wire, body))}
            sums[value(*f[1]).decode()] = value(*f[2])
        elif field == 14:
            chunk = value(wire, body)
    return sums, chunk
