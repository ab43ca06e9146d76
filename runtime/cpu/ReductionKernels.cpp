// Reduce* (axes as input 1, keepdims, noop_with_empty_axes) and ArgMax/ArgMin.
//
// Floating-point reductions accumulate in double; integer ones in int64
// (wrapping like numpy). f16/bf16 are computed in f32. A reduction over zero
// elements gives the operation's identity (0 for sums, 1 for products, -inf
// for max and log-sums, +inf for min, NaN for a mean).
#include "runtime/cpu/HalfFloat.h"
#include "runtime/cpu/Kernel.h"
#include "runtime/cpu/ReduceGroups.h"
#include "runtime/cpu/ReduceOps.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace megac::cpu {

namespace {

using namespace reduce; // the rules both backends share

// --- How the input is traversed ---

// Dims of extent 1 are dropped and neighbouring dims with the same role are
// merged. When the reduced dims then form one block, the input is
// [outer, reduced, inner] ("blocked"); otherwise each output element gathers
// its inputs through offset tables.
struct ReducePlan {
  int64_t outCount = 1, redCount = 1;
  bool blocked = true;
  int64_t outer = 1, inner = 1;
  std::vector<int64_t> outBase, redOffset; // when !blocked
};

ReducePlan planReduce(const Shape &shape, const std::vector<bool> &reduced) {
  ReducePlan p;
  const ReduceGroups g = groupReduceDims(shape, reduced); // the grouping both backends share
  p.outCount = g.outCount;
  p.redCount = g.redCount;
  p.outer = g.outer;
  p.inner = g.inner;
  if (g.blocked) return p;

  p.blocked = false;
  std::vector<int64_t> strides = rowMajorStrides(shape);
  // Offsets of every combination of the dims with role `want`, in row-major order.
  auto offsets = [&](bool want) {
    std::vector<int64_t> offs{0};
    for (size_t d = 0; d < shape.size(); ++d) {
      if (reduced[d] != want || shape[d] == 1) continue;
      std::vector<int64_t> next;
      next.reserve(offs.size() * size_t(shape[d]));
      for (int64_t base : offs)
        for (int64_t i = 0; i < shape[d]; ++i) next.push_back(base + i * strides[d]);
      offs.swap(next);
    }
    return offs;
  };
  p.outBase = offsets(false);
  p.redOffset = offsets(true);
  return p;
}

// Runs result[o] = combine over the reduced elements r of term(x[o, r], o),
// starting from `identity`.
template <class T, class Acc, class Term, class Combine>
void reduceCore(const ReducePlan &p, const T *x, Acc identity, Term term, Combine combine, Acc *result) {
  const int64_t R = p.redCount;
  if (!p.blocked) {
    parallelFor(p.outCount, R, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const T *base = x + p.outBase[size_t(o)];
        Acc a = identity;
        for (int64_t r = 0; r < R; ++r) a = combine(a, term(base[p.redOffset[size_t(r)]], o));
        result[o] = a;
      }
    });
    return;
  }
  if (p.inner == 1) { // each output reduces one contiguous row
    parallelFor(p.outer, R, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const T *row = x + o * R;
        // Four independent chains hide the add latency.
        Acc a0 = identity, a1 = identity, a2 = identity, a3 = identity;
        int64_t r = 0;
        for (; r + 4 <= R; r += 4) {
          a0 = combine(a0, term(row[r], o));
          a1 = combine(a1, term(row[r + 1], o));
          a2 = combine(a2, term(row[r + 2], o));
          a3 = combine(a3, term(row[r + 3], o));
        }
        for (; r < R; ++r) a0 = combine(a0, term(row[r], o));
        result[o] = combine(combine(a0, a1), combine(a2, a3));
      }
    });
    return;
  }
  // [outer, R, inner]: accumulate whole rows of `inner` at a time (contiguous,
  // vectorizable); split `inner` into chunks when `outer` alone gives too
  // little parallelism.
  const int64_t inner = p.inner;
  int64_t chunk = inner;
  if (p.outer < numThreads()) chunk = std::max<int64_t>(256, (inner + numThreads() - 1) / numThreads());
  const int64_t chunks = (inner + chunk - 1) / chunk;
  parallelFor(p.outer * chunks, chunk * R, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      int64_t o = task / chunks, i0 = (task % chunks) * chunk, i1 = std::min(inner, i0 + chunk);
      Acc *acc = result + o * inner;
      for (int64_t i = i0; i < i1; ++i) acc[i] = identity;
      for (int64_t r = 0; r < R; ++r) {
        const T *row = x + (o * R + r) * inner;
        for (int64_t i = i0; i < i1; ++i) acc[i] = combine(acc[i], term(row[i], o * inner + i));
      }
    }
  });
}

// L2, LogSum and LogSumExp need real arithmetic even on integer inputs.
template <class T, ReduceKind K>
using ReduceAcc = std::conditional_t<std::is_floating_point_v<T> || K == ReduceKind::L2 || K == ReduceKind::LogSum ||
                                         K == ReduceKind::LogSumExp,
                                     double, int64_t>;

template <class T, ReduceKind K> void reduceTyped(const ReducePlan &p, const T *x, T *y) {
  using Acc = ReduceAcc<T, K>;
  const int64_t n = p.outCount;
  if (n == 0) return;
  std::vector<Acc> acc(static_cast<size_t>(n));
  auto add = [](Acc a, Acc b) { return wrapAdd(a, b); };
  auto value = [](T v, int64_t) { return Acc(v); };
  auto square = [](T v, int64_t) { return reduce::square<Acc>(v); };
  auto magnitude = [](T v, int64_t) { return reduce::magnitude<Acc>(v); };
  auto maxOf = [](Acc a, Acc b) { return maxCombine(a, b); };
  auto minOf = [](Acc a, Acc b) { return minCombine(a, b); };
  if constexpr (K == ReduceKind::Sum || K == ReduceKind::Mean || K == ReduceKind::LogSum) {
    reduceCore(p, x, Acc(0), value, add, acc.data());
  } else if constexpr (K == ReduceKind::SumSquare || K == ReduceKind::L2) {
    reduceCore(p, x, Acc(0), square, add, acc.data());
  } else if constexpr (K == ReduceKind::L1) {
    reduceCore(p, x, Acc(0), magnitude, add, acc.data());
  } else if constexpr (K == ReduceKind::Prod) {
    reduceCore(p, x, Acc(1), value, [](Acc a, Acc b) { return wrapMul(a, b); }, acc.data());
  } else if constexpr (K == ReduceKind::Max) {
    reduceCore(p, x, maxIdentity<T, Acc>(), value, maxOf, acc.data());
  } else if constexpr (K == ReduceKind::Min) {
    reduceCore(p, x, minIdentity<T, Acc>(), value, minOf, acc.data());
  } else {
    static_assert(K == ReduceKind::LogSumExp);
    // log(sum(exp(x - m))) + m with m the max, so large inputs do not overflow.
    std::vector<Acc> maxes(static_cast<size_t>(n));
    reduceCore(p, x, -std::numeric_limits<Acc>::infinity(), value, maxOf, maxes.data());
    const Acc *m = maxes.data();
    auto shiftedExp = [m](T v, int64_t o) { return Acc(std::exp(double(v) - m[o])); };
    reduceCore(p, x, Acc(0), shiftedExp, add, acc.data());
    for (int64_t o = 0; o < n; ++o) acc[size_t(o)] = std::isfinite(m[o]) ? m[o] + std::log(acc[size_t(o)]) : m[o];
  }
  const int64_t count = p.redCount;
  for (int64_t o = 0; o < n; ++o) {
    Acc a = acc[size_t(o)];
    if constexpr (K == ReduceKind::Mean) a = meanOf(a, count);
    if constexpr (K == ReduceKind::L2) a = math::sqrt(a);
    if constexpr (K == ReduceKind::LogSum) a = std::log(a);
    y[o] = T(a);
  }
}

// Reduced-dims mask from the optional axes input; an error for bad axes.
llvm::Expected<std::vector<bool>> reducedDims(llvm::StringRef op, const KernelContext &ctx, bool &noop) {
  const Tensor &x = *ctx.input(0);
  int64_t rank = x.rank();
  std::vector<int64_t> axes;
  if (const Tensor *a = ctx.input(1)) {
    if (a->dtype() != DType::I64 && a->dtype() != DType::I32)
      return kernelError(op, "axes must be an int64 tensor");
    axes = a->toInt64Vector();
  }
  noop = axes.empty() && ctx.attrs.getInt("noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced;
  std::string bad = reducedDimsFromAxes(rank, axes, reduced);
  if (!bad.empty()) return kernelError(op, bad);
  return reduced;
}

template <ReduceKind K> llvm::Error reduceKernel(KernelContext &ctx) {
  constexpr const char *op = reduceName<K>();
  const Tensor *x = ctx.input(0);
  if (!x) return kernelError(op, "needs a data input");
  Tensor &y = ctx.output(0);
  if (y.dtype() != x->dtype()) return kernelError(op, "output element type differs from the input's");
  bool noop = false;
  auto reduced = reducedDims(op, ctx, noop);
  if (!reduced) return reduced.takeError();
  if (noop) {
    if (y.numel() != x->numel()) return kernelError(op, "output shape does not match the input (no-op reduction)");
    std::memcpy(y.raw(), x->raw(), x->nbytes());
    return llvm::Error::success();
  }
  ReducePlan p = planReduce(x->shape(), *reduced);
  if (p.outCount != y.numel())
    return kernelError(op, "output " + shapeToString(y.shape()) + " does not match the reduction of " +
                               shapeToString(x->shape()));
  constexpr bool allowBool = K == ReduceKind::Max || K == ReduceKind::Min;
  switch (x->dtype()) {
  case DType::F32: reduceTyped<float, K>(p, x->data<float>(), y.data<float>()); break;
  case DType::F64: reduceTyped<double, K>(p, x->data<double>(), y.data<double>()); break;
  case DType::F16:
  case DType::BF16: {
    Tensor wx = widenToF32(*x), wy(DType::F32, y.shape());
    reduceTyped<float, K>(p, wx.data<float>(), wy.data<float>());
    narrowFromF32(wy, y);
    break;
  }
  case DType::I8: reduceTyped<int8_t, K>(p, x->data<int8_t>(), y.data<int8_t>()); break;
  case DType::I16: reduceTyped<int16_t, K>(p, x->data<int16_t>(), y.data<int16_t>()); break;
  case DType::I32: reduceTyped<int32_t, K>(p, x->data<int32_t>(), y.data<int32_t>()); break;
  case DType::I64: reduceTyped<int64_t, K>(p, x->data<int64_t>(), y.data<int64_t>()); break;
  case DType::U8: reduceTyped<uint8_t, K>(p, x->data<uint8_t>(), y.data<uint8_t>()); break;
  case DType::U16: reduceTyped<uint16_t, K>(p, x->data<uint16_t>(), y.data<uint16_t>()); break;
  case DType::U32: reduceTyped<uint32_t, K>(p, x->data<uint32_t>(), y.data<uint32_t>()); break;
  case DType::U64: reduceTyped<uint64_t, K>(p, x->data<uint64_t>(), y.data<uint64_t>()); break;
  case DType::Bool:
    if (!allowBool) return kernelError(op, "bool input is not supported");
    reduceTyped<uint8_t, K>(p, x->data<uint8_t>(), y.data<uint8_t>());
    break;
  default: return kernelError(op, llvm::Twine("unsupported element type ") + dtypeName(x->dtype()));
  }
  return llvm::Error::success();
}

// --- ArgMax / ArgMin ---

// Whether v replaces the current best. NaN counts as the extreme value (the
// first one, or the last with selectLast), as in numpy.
template <bool IsMax, class T> bool betterArg(T v, T best, bool selectLast) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(best)) return selectLast && std::isnan(v);
    if (std::isnan(v)) return true;
  }
  if (IsMax ? v > best : v < best) return true;
  return selectLast && v == best;
}

template <bool IsMax, class T>
void argReduce(const T *x, int64_t *y, int64_t outer, int64_t n, int64_t inner, bool selectLast) {
  parallelFor(outer, n * inner, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const T *block = x + o * n * inner;
      int64_t *out = y + o * inner;
      for (int64_t i = 0; i < inner; ++i) {
        T best = block[i];
        int64_t bestIdx = 0;
        for (int64_t k = 1; k < n; ++k) {
          T v = block[k * inner + i];
          if (betterArg<IsMax>(v, best, selectLast)) {
            best = v;
            bestIdx = k;
          }
        }
        out[i] = bestIdx;
      }
    }
  });
}

template <bool IsMax> llvm::Error argKernel(KernelContext &ctx) {
  const char *op = IsMax ? "ArgMax" : "ArgMin";
  const Tensor *x = ctx.input(0);
  if (!x) return kernelError(op, "needs a data input");
  Tensor &y = ctx.output(0);
  if (y.dtype() != DType::I64) return kernelError(op, "output must be int64");
  int64_t rank = x->rank(), axis = ctx.attrs.getInt("axis", 0);
  if (rank == 0) return kernelError(op, "input must have rank >= 1");
  if (axis < -rank || axis >= rank)
    return kernelError(op, "axis " + llvm::Twine(axis) + " is out of range for rank " + llvm::Twine(rank));
  if (axis < 0) axis += rank;
  int64_t outer = 1, inner = 1, n = x->dim(axis);
  for (int64_t d = 0; d < axis; ++d) outer *= x->dim(d);
  for (int64_t d = axis + 1; d < rank; ++d) inner *= x->dim(d);
  if (outer * inner != y.numel()) return kernelError(op, "output shape does not match the input");
  if (y.numel() == 0) return llvm::Error::success();
  if (n == 0) return kernelError(op, "cannot take the arg-extreme of an empty axis");
  bool selectLast = ctx.attrs.getInt("select_last_index", 0) != 0;
  int64_t *out = y.data<int64_t>();
  switch (x->dtype()) {
#define MEGAC_ARG_CASE(DT, T)                                                                                          \
  case DType::DT: argReduce<IsMax>(x->data<T>(), out, outer, n, inner, selectLast); break;
    MEGAC_ARG_CASE(F32, float)
    MEGAC_ARG_CASE(F64, double)
    MEGAC_ARG_CASE(I8, int8_t)
    MEGAC_ARG_CASE(I16, int16_t)
    MEGAC_ARG_CASE(I32, int32_t)
    MEGAC_ARG_CASE(I64, int64_t)
    MEGAC_ARG_CASE(U8, uint8_t)
    MEGAC_ARG_CASE(U16, uint16_t)
    MEGAC_ARG_CASE(U32, uint32_t)
    MEGAC_ARG_CASE(U64, uint64_t)
    MEGAC_ARG_CASE(Bool, uint8_t)
#undef MEGAC_ARG_CASE
  case DType::F16:
  case DType::BF16: {
    Tensor wx = widenToF32(*x);
    argReduce<IsMax>(wx.data<float>(), out, outer, n, inner, selectLast);
    break;
  }
  default: return kernelError(op, llvm::Twine("unsupported element type ") + dtypeName(x->dtype()));
  }
  return llvm::Error::success();
}

} // namespace

void registerReductionKernels() {
  registerKernel("ReduceSum", reduceKernel<ReduceKind::Sum>);
  registerKernel("ReduceMean", reduceKernel<ReduceKind::Mean>);
  registerKernel("ReduceMax", reduceKernel<ReduceKind::Max>);
  registerKernel("ReduceMin", reduceKernel<ReduceKind::Min>);
  registerKernel("ReduceProd", reduceKernel<ReduceKind::Prod>);
  registerKernel("ReduceSumSquare", reduceKernel<ReduceKind::SumSquare>);
  registerKernel("ReduceL1", reduceKernel<ReduceKind::L1>);
  registerKernel("ReduceL2", reduceKernel<ReduceKind::L2>);
  registerKernel("ReduceLogSum", reduceKernel<ReduceKind::LogSum>);
  registerKernel("ReduceLogSumExp", reduceKernel<ReduceKind::LogSumExp>);
  registerKernel("ArgMax", argKernel<true>);
  registerKernel("ArgMin", argKernel<false>);
}

} // namespace megac::cpu
