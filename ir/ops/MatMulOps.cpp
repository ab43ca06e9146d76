// Type inference for MatMul (numpy matmul) and Gemm.
#include "ir/OpSchema.h"

#include <algorithm>

namespace megac::ir {

namespace {

bool isMatMulType(DType t) {
  switch (t) {
  case DType::F32: case DType::F64: case DType::F16: case DType::BF16:
  case DType::I32: case DType::I64: case DType::U32: case DType::U64:
    return true;
  default:
    return false;
  }
}

llvm::Error sameNumericType(InferContext &c, const TensorType &a, const TensorType &b, const char *what) {
  if (a.dtype != b.dtype)
    return c.error(llvm::Twine(what) + " have different element types (" + dtypeName(a.dtype) + " and " +
                   dtypeName(b.dtype) + ")");
  if (!isMatMulType(a.dtype)) return c.error(llvm::Twine("element type ") + dtypeName(a.dtype) + " is not supported");
  return llvm::Error::success();
}

llvm::Error inferMatMul(InferContext &c) {
  const TensorType &a = *c.inputType(0), &b = *c.inputType(1);
  if (auto e = sameNumericType(c, a, b, "the inputs")) return e;
  if (a.shape.empty() || b.shape.empty()) return c.error("MatMul inputs must have rank >= 1 (not scalars)");
  // 1-D operands are promoted to matrices ([K] -> [1,K] for A, [K,1] for B);
  // the added dimension is removed from the result.
  Shape sa = a.shape, sb = b.shape;
  bool aVector = sa.size() == 1, bVector = sb.size() == 1;
  if (aVector) sa.insert(sa.begin(), 1);
  if (bVector) sb.push_back(1);
  int64_t k = sa.back(), kb = sb[sb.size() - 2];
  if (k != kb)
    return c.error("inner dimensions differ: " + shapeToString(a.shape) + " x " + shapeToString(b.shape));
  Shape batchA(sa.begin(), sa.end() - 2), batchB(sb.begin(), sb.end() - 2);
  auto batch = broadcastShapes(c, batchA, batchB);
  if (!batch) return batch.takeError();
  Shape out = *batch;
  if (!aVector) out.push_back(sa[sa.size() - 2]);
  if (!bVector) out.push_back(sb.back());
  c.setOutput(0, a.dtype, out);
  return llvm::Error::success();
}

llvm::Error inferGemm(InferContext &c) {
  const TensorType &a = *c.inputType(0), &b = *c.inputType(1);
  if (auto e = sameNumericType(c, a, b, "A and B")) return e;
  if (a.shape.size() != 2 || b.shape.size() != 2)
    return c.error("A and B must be 2-D, got " + shapeToString(a.shape) + " and " + shapeToString(b.shape));
  bool transA = c.attrs().getInt("transA", 0) != 0, transB = c.attrs().getInt("transB", 0) != 0;
  int64_t m = transA ? a.shape[1] : a.shape[0], k = transA ? a.shape[0] : a.shape[1];
  int64_t kb = transB ? b.shape[1] : b.shape[0], n = transB ? b.shape[0] : b.shape[1];
  if (k != kb)
    return c.error("inner dimensions differ: A " + shapeToString(a.shape) + (transA ? " (transposed)" : "") + ", B " +
                   shapeToString(b.shape) + (transB ? " (transposed)" : ""));
  if (const TensorType *ct = c.inputType(2)) {
    if (ct->dtype != a.dtype) return c.error("C has a different element type than A and B");
    const Shape &s = ct->shape;
    bool ok = s.size() <= 2;
    if (ok && !s.empty()) ok = s.back() == 1 || s.back() == n;
    if (ok && s.size() == 2) ok = s[0] == 1 || s[0] == m;
    if (!ok)
      return c.error("C " + shapeToString(s) + " does not broadcast to the result [" + llvm::Twine(m) + "," +
                     llvm::Twine(n) + "]");
  }
  c.setOutput(0, a.dtype, {m, n});
  return llvm::Error::success();
}

} // namespace

void registerMatMulSchemas() {
  registerOpSchema({"MatMul", 2, 2, 1, 1, inferMatMul});
  registerOpSchema({"Gemm", 2, 3, 1, 1, inferGemm});
}

} // namespace megac::ir
