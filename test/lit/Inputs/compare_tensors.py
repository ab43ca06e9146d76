"""Compares two tensor files (serialized ONNX TensorProto) by relative L2 error
(||a - b|| / ||b||). Usage: compare_tensors.py GOT.pb REFERENCE.pb TOLERANCE [LABEL].
Prints 'LABEL ok' or the error and exits 1 past the tolerance or on a shape mismatch."""
import sys
import numpy as np
import onnx
from onnx import numpy_helper


def load(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t).astype(np.float64)


got, ref = load(sys.argv[1]), load(sys.argv[2])
tol = float(sys.argv[3])
label = sys.argv[4] if len(sys.argv) > 4 else "tensors"
if got.shape != ref.shape:
    print(f"{label}: shape {got.shape}, reference {ref.shape}")
    sys.exit(1)
err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
if not err <= tol:
    print(f"{label}: relative error {err:.3e} > {tol:g}")
    sys.exit(1)
print(f"{label} ok")
