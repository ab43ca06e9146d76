#include "runtime/cpu/Broadcast.h"

#include <cstring>

namespace megac::cpu {

bool broadcastsTo(const Shape &in, const Shape &out) {
  if (in.size() > out.size()) return false;
  size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != out[lead + i] && in[i] != 1) return false;
  return true;
}

std::optional<Shape> broadcastAll(llvm::ArrayRef<Shape> shapes) {
  size_t rank = 0;
  for (const Shape &s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape &s : shapes) {
    size_t lead = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t &o = out[lead + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o != 1) return std::nullopt;
      o = s[i];
    }
  }
  return out;
}

BroadcastPlan::BroadcastPlan(const Shape &out, llvm::ArrayRef<Shape> inputs) {
  numel_ = numElements(out);
  const size_t n = inputs.size();
  strides_.resize(n);
  // Per output dim (skipping size-1 dims): which inputs have it (bit k set)
  // or are broadcast along it.
  std::vector<int64_t> keptDims;
  std::vector<std::vector<bool>> has; // [dim][input]
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    std::vector<bool> h(n);
    for (size_t k = 0; k < n; ++k) {
      const Shape &s = inputs[k];
      size_t lead = out.size() - s.size();
      h[k] = d >= lead && s[d - lead] != 1;
    }
    if (!keptDims.empty() && has.back() == h) {
      keptDims.back() *= out[d];
      continue;
    }
    keptDims.push_back(out[d]);
    has.push_back(std::move(h));
  }
  dims_ = keptDims;
  for (size_t k = 0; k < n; ++k) {
    strides_[k].assign(dims_.size(), 0);
    int64_t stride = 1;
    for (size_t d = dims_.size(); d-- > 0;) {
      if (!has[d][k]) continue;
      strides_[k][d] = stride;
      stride *= dims_[d];
    }
  }
}

llvm::Expected<BroadcastPlan> makeBroadcastPlan(llvm::StringRef opType, const Shape &out,
                                                llvm::ArrayRef<const Tensor *> inputs) {
  std::vector<Shape> shapes;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!broadcastsTo(inputs[k]->shape(), out))
      return kernelError(opType, "input " + llvm::Twine(k) + " of shape " + shapeToString(inputs[k]->shape()) +
                                     " does not broadcast to the output shape " + shapeToString(out));
    shapes.push_back(inputs[k]->shape());
  }
  return BroadcastPlan(out, shapes);
}

template <class T> static void copyBroadcast(const BroadcastPlan &plan, const T *src, T *dst) {
  const bool contiguous = plan.innerStride(0) == 1;
  plan.run(1, [&](int64_t o, const int64_t *in, int64_t len) {
    if (contiguous) std::memcpy(dst + o, src + in[0], size_t(len) * sizeof(T));
    else std::fill(dst + o, dst + o + len, src[in[0]]);
  });
}

llvm::Error broadcastCopy(llvm::StringRef opType, const Tensor &src, Tensor &dst) {
  if (src.dtype() != dst.dtype())
    return kernelError(opType, llvm::Twine("cannot copy a ") + dtypeName(src.dtype()) + " tensor into a " +
                                   dtypeName(dst.dtype()) + " one");
  auto plan = makeBroadcastPlan(opType, dst.shape(), {&src});
  if (!plan) return plan.takeError();
  switch (dtypeSize(src.dtype())) {
  case 1: copyBroadcast(*plan, src.data<uint8_t>(), dst.data<uint8_t>()); break;
  case 2: copyBroadcast(*plan, src.data<uint16_t>(), dst.data<uint16_t>()); break;
  case 4: copyBroadcast(*plan, src.data<uint32_t>(), dst.data<uint32_t>()); break;
  case 8: copyBroadcast(*plan, src.data<uint64_t>(), dst.data<uint64_t>()); break;
  default: return kernelError(opType, llvm::Twine("unsupported element type ") + dtypeName(src.dtype()));
  }
  return llvm::Error::success();
}

} // namespace megac::cpu
