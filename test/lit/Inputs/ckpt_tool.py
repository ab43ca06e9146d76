"""Edits and checks megac checkpoints for tests, without megac (megac_files.py).

usage: ckpt_tool.py verify STEP_DIR
         checks checkpoint.meta's header and each array's checksum independently
       ckpt_tool.py set-step STEP_DIR N
         edits the meta's step in place, leaving its header (and checksum) as it was
       ckpt_tool.py to-v1 STEP_DIR
         rewrites checkpoint.meta as format 1 (no header, no checksums)
       ckpt_tool.py fill STEP_DIR FILE (VALUE | random)
         overwrites a whole array with VALUE (a float) or random bytes
       ckpt_tool.py poke STEP_DIR FILE PARAM ELEMENT VALUE
         sets one element of one parameter's range of an array
"""
import os
import random
import struct
import sys

import megac_files as mf


def meta_path(step_dir):
    return os.path.join(step_dir, "checkpoint.meta")


def main(argv):
    cmd, step_dir = argv[1], argv[2]
    version, payload, header_ok = mf.read_meta(meta_path(step_dir))
    if cmd == "verify":
        assert version == 2, version
        assert header_ok, "checkpoint.meta: checksum mismatch"
        print("checkpoint.meta ok")
        sums, chunk = mf.meta_checksums(payload)
        assert chunk > 0
        for f in ("params.f32", "adam_m.f32", "adam_v.f32"):
            data = open(os.path.join(step_dir, f), "rb").read()
            assert mf.array_checksum(data, chunk) == sums[f], f + ": checksum mismatch"
            print(f + " ok")
    elif cmd == "set-step":
        data = open(meta_path(step_dir), "rb").read()
        head = 8 if version == 1 else 24
        new = mf.patch(payload, [2], int(argv[3]))
        open(meta_path(step_dir), "wb").write(data[:head] + new)
    elif cmd == "to-v1":
        mf.write_meta(meta_path(step_dir), mf.patch(mf.drop(payload, {13, 14}), [1], 1), 1, legacy=True)
    elif cmd == "fill":
        path = os.path.join(step_dir, argv[3])
        size = os.path.getsize(path)
        if argv[4] == "random":
            data = random.Random(1).randbytes(size)
        else:
            data = struct.pack("<f", float(argv[4])) * (size // 4)
        open(path, "wb").write(data)
    elif cmd == "poke":
        path, name, element = os.path.join(step_dir, argv[3]), argv[4], int(argv[5])
        offsets = {n: off for n, _, off in mf.meta_params(payload)}
        with open(path, "r+b") as f:
            f.seek((offsets[name] + element) * 4)
            f.write(struct.pack("<f", float(argv[6])))
    else:
        raise SystemExit(__doc__)


main(sys.argv)
