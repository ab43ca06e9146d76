// Type inference of LayerNormalization (opset 17), RMSNormalization,
// RotaryEmbedding (opset 23) and Attention (opset 23..25). The shape rules
// live in runtime/cpu/NormAttentionShapes so that kernels check the same.
#include "ir/OpSchema.h"
#include "runtime/cpu/NormAttentionShapes.h"

namespace megac::ir {

namespace {

llvm::Error wrap(const InferContext &c, llvm::Error e) {
  if (!e) return llvm::Error::success();
  return c.error(llvm::toString(std::move(e)));
}

llvm::Error requireFloat(const InferContext &c, size_t i, const char *what) {
  const TensorType *t = c.inputType(i);
  if (t && !isFloatType(t->dtype)) return c.error(llvm::Twine(what) + " must be a float tensor, got " + t->str());
  return llvm::Error::success();
}

llvm::Error requireSameDType(const InferContext &c, size_t i, size_t j, const char *what, const char *other) {
  const TensorType *a = c.inputType(i), *b = c.inputType(j);
  if (a && b && a->dtype != b->dtype)
    return c.error(llvm::Twine(what) + " is " + dtypeName(a->dtype) + " but " + other + " is " + dtypeName(b->dtype));
  return llvm::Error::success();
}

llvm::Error inferLayerNormalization(InferContext &c) {
  const TensorType &x = *c.inputType(0);
  if (auto e = requireFloat(c, 0, "X")) return e;
  if (auto e = requireSameDType(c, 1, 0, "Scale", "X")) return e;
  if (auto e = requireSameDType(c, 2, 0, "B", "X")) return e;
  auto d = cpu::normDims(x.shape, c.attrs().getInt("axis", -1));
  if (!d) return wrap(c, d.takeError());
  if (auto e = cpu::checkNormParam(c.inputType(1)->shape, x.shape, "Scale")) return wrap(c, std::move(e));
  if (c.hasInput(2))
    if (auto e = cpu::checkNormParam(c.inputType(2)->shape, x.shape, "B")) return wrap(c, std::move(e));
  auto stash = cpu::stashDType(c.attrs().getInt("stash_type", 1));
  if (!stash) return wrap(c, stash.takeError());
  c.setOutput(0, x.dtype, x.shape);
  c.setOutput(1, *stash, d->statShape);
  c.setOutput(2, *stash, d->statShape);
  return llvm::Error::success();
}

llvm::Error inferRMSNormalization(InferContext &c) {
  const TensorType &x = *c.inputType(0);
  if (auto e = requireFloat(c, 0, "X")) return e;
  if (auto e = requireFloat(c, 1, "scale")) return e;
  auto d = cpu::normDims(x.shape, c.attrs().getInt("axis", -1));
  if (!d) return wrap(c, d.takeError());
  if (auto e = cpu::checkNormParam(c.inputType(1)->shape, x.shape, "scale")) return wrap(c, std::move(e));
  auto stash = cpu::stashDType(c.attrs().getInt("stash_type", 1));
  if (!stash) return wrap(c, stash.takeError());
  // As ONNX's own inference: Y has X's type.
  c.setOutput(0, x.dtype, x.shape);
  return llvm::Error::success();
}

llvm::Error inferRotaryEmbedding(InferContext &c) {
  const TensorType &x = *c.inputType(0);
  if (auto e = requireFloat(c, 0, "X")) return e;
  if (auto e = requireSameDType(c, 1, 0, "cos_cache", "X")) return e;
  if (auto e = requireSameDType(c, 2, 0, "sin_cache", "X")) return e;
  if (const TensorType *ids = c.inputType(3))
    if (!isIntegerType(ids->dtype)) return c.error("position_ids must be integers, got " + ids->str());
  auto d = cpu::rotaryDims(c.attrs(), x.shape, c.inputType(1)->shape, c.inputType(2)->shape,
                           c.hasInput(3) ? &c.inputType(3)->shape : nullptr);
  if (!d) return wrap(c, d.takeError());
  c.setOutput(0, x.dtype, x.shape);
  return llvm::Error::success();
}

llvm::Error inferAttention(InferContext &c) {
  for (size_t i : {0, 1, 2})
    if (auto e = requireFloat(c, i, i == 0 ? "Q" : i == 1 ? "K" : "V")) return e;
  if (auto e = requireSameDType(c, 1, 0, "K", "Q")) return e;
  if (auto e = requireSameDType(c, 4, 0, "past_key", "Q")) return e;
  if (auto e = requireSameDType(c, 5, 2, "past_value", "V")) return e;
  if (const TensorType *m = c.inputType(3))
    if (m->dtype != DType::Bool && !isFloatType(m->dtype) && !isIntegerType(m->dtype))
      return c.error("attn_mask must be bool or numeric, got " + m->str());
  if (const TensorType *n = c.inputType(6))
    if (!isIntegerType(n->dtype)) return c.error("nonpad_kv_seqlen must be int64, got " + n->str());
  cpu::AttentionInputShapes in;
  const Shape *shapes[7] = {};
  for (size_t i = 0; i < 7; ++i)
    if (c.hasInput(i)) shapes[i] = &c.inputType(i)->shape;
  in.q = shapes[0], in.k = shapes[1], in.v = shapes[2], in.mask = shapes[3];
  in.pastKey = shapes[4], in.pastValue = shapes[5], in.nonpadKvSeqlen = shapes[6];
  auto d = cpu::attentionDims(c.attrs(), in);
  if (!d) return wrap(c, d.takeError());
  DType t1 = c.inputType(0)->dtype, t2 = c.inputType(2)->dtype;
  c.setOutput(0, t1, d->yShape);
  c.setOutput(1, t1, d->presentKeyShape);
  c.setOutput(2, t2, d->presentValueShape);
  c.setOutput(3, t1, d->qkShape);
  return llvm::Error::success();
}

} // namespace

void registerNormAttentionSchemas() {
  registerOpSchema({"LayerNormalization", 2, 3, 1, 3, inferLayerNormalization});
  registerOpSchema({"RMSNormalization", 2, 2, 1, 1, inferRMSNormalization});
  registerOpSchema({"RotaryEmbedding", 3, 4, 1, 1, inferRotaryEmbedding});
  registerOpSchema({"Attention", 3, 7, 1, 4, inferAttention});
}

} // namespace megac::ir
