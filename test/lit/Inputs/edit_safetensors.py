"""Writes an edited copy of a safetensors file, for the error tests of --weights.
Usage: edit_safetensors.py IN OUT EDIT [ARGS...], EDIT one of:
  rename OLD NEW      rename a tensor
  drop NAME           remove a tensor (its bytes stay, unreferenced)
  transpose NAME      swap a 2-D tensor's shape in the header (bytes as they are)
  offsets NAME B E    set a tensor's data_offsets
  shape NAME D0,D1..  set a tensor's shape
  header-length N     set the 8-byte header length field
  truncate N          keep the first N bytes of the data
  slashes             write every name with '/' for '.' (names that match nothing)
  nan NAME            set a F32 tensor's first element to NaN""" 
import json
import struct
import sys

src, dst, edit, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
length = None
if edit == "rename":
    header[args[1]] = header.pop(args[0])
elif edit == "drop":
    del header[args[0]]
elif edit == "transpose":
    header[args[0]]["shape"] = header[args[0]]["shape"][::-1]
elif edit == "offsets":
    header[args[0]]["data_offsets"] = [int(args[1]), int(args[2])]
elif edit == "shape":
    header[args[0]]["shape"] = [int(d) for d in args[1].split(",")]
elif edit == "header-length":
    length = int(args[0])
elif edit == "slashes":
    header = {k if k == "__metadata__" else k.replace(".", "/"): v for k, v in header.items()}
elif edit == "nan":
    b = header[args[0]]["data_offsets"][0]
    data = data[:b] + struct.pack("<f", float("nan")) + data[b + 4:]
elif edit == "truncate":
    data = data[:int(args[0])]
else:
    sys.exit(f"unknown edit {edit}")
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
with open(dst, "wb") as f:
    f.write(struct.pack("<Q", len(text) if length is None else length) + text + data)
