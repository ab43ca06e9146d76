// Type inference for Softmax and LogSoftmax (opset >= 13 form: along `axis`,
// default -1; the importer rewrites older opsets' flatten-to-2-D form).
#include "ir/OpSchema.h"

namespace megac::ir {

namespace {

llvm::Error inferSoftmax(InferContext &c) {
  const TensorType &x = *c.inputType(0);
  if (!isFloatType(x.dtype))
    return c.error(llvm::Twine("input must be a floating-point tensor, got ") + dtypeName(x.dtype));
  if (auto axis = normalizeAxis(c, c.attrs().getInt("axis", -1), int64_t(x.shape.size())); !axis)
    return axis.takeError();
  c.setOutput(0, x.dtype, x.shape);
  return llvm::Error::success();
}

} // namespace

void registerSoftmaxSchemas() {
  registerOpSchema({"Softmax", 1, 1, 1, 1, inferSoftmax});
  registerOpSchema({"LogSoftmax", 1, 1, 1, 1, inferSoftmax});
}

} // namespace megac::ir
