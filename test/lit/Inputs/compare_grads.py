"""Compares `megac grad` output (DIR/loss.pb, DIR/grad/<initializer>.pb) with a
fixture's PyTorch reference, mapping names through meta.json's
initializer_map. Prints one line per checked tensor and exits 1 on a miss."""
import json, os, sys, urllib.parse
import numpy as np
import onnx
from onnx import numpy_helper

out, fixture = sys.argv[1], sys.argv[2]

def load(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t).astype(np.float64)

def rel(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)

ok = True
loss_err = rel(load(os.path.join(out, "loss.pb")), load(os.path.join(fixture, "ref", "loss.pb")))
print(f"loss rel {loss_err:.2e}")
ok &= loss_err < 1e-5
imap = json.load(open(os.path.join(fixture, "meta.json")))["initializer_map"]
files = sorted(os.listdir(os.path.join(out, "grad")))
for f in files:
    name = urllib.parse.unquote(f[:-3])
    entry = imap[name]
    g = load(os.path.join(out, "grad", f))
    if entry["transposed"]:
        g = g.T
    e = rel(g, load(os.path.join(fixture, "ref", "grad", entry["param"] + ".pb")))
    print(f"grad {entry['param']} rel {'ok' if e < 1e-4 else 'BAD %.2e' % e}")
    ok &= e < 1e-4
print(f"checked {len(files)} gradients")
sys.exit(0 if ok else 1)
