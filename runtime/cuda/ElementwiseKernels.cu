// CUDA kernels of the elementwise ops: binary ops with ONNX multidirectional
// broadcasting, unary ops, Where, Cast, Clip, Identity, Dropout (inference)
// and megac.GeluGrad. The ops' formulas are the CPU kernels' own
// (runtime/cpu/UnaryOps.h, BinaryOps.h), compiled for the device.
//
// Two launch paths:
//  - flat: every input is either the output's shape or a single element;
//    4-wide vector loads/stores where the buffers allow, a scalar tail.
//  - broadcast: the operands' dims are merged where they broadcast alike
//    (as the CPU's BroadcastPlan), and each thread computes the operands'
//    offsets from its output index (32-bit fast division when every offset
//    fits, else 64-bit). When the innermost merged dim is a multiple of 4,
//    each thread handles 4 outputs of one row with vector accesses.
#include "runtime/cuda/CudaCheck.h"
#include "runtime/cuda/ElementwiseIndexing.cuh"
#include "runtime/cuda/GpuKernel.h"
#include "runtime/cpu/BinaryOps.h"
#include "runtime/cpu/Broadcast.h"
#include "runtime/cpu/ConvertNumber.h"
#include "runtime/cpu/ScalarMath.h"
#include "runtime/cpu/UnaryOps.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <limits>
#include <type_traits>

// Named (not anonymous) so that nvcc does not warn about the unused static
// members of the op structs; nothing here is declared in a header.
namespace megac::cuda::elementwise {

constexpr int kThreads = 256;
constexpr int kMaxBroadcastDims = 8;

// ---------------------------------------------------------------------------
// Element types

// The C++ element type of a dtype; bool is stored as uint8_t (0 or 1).
template <class T, bool Bool = false> struct Tag {
  using type = T;
  static constexpr bool isBool = Bool;
};

enum TypeBits : unsigned {
  kF32 = 1u << 0,
  kF64 = 1u << 1,
  kF16 = 1u << 2,
  kBF16 = 1u << 3,
  kI8 = 1u << 4,
  kI32 = 1u << 5,
  kI64 = 1u << 6,
  kU8 = 1u << 7,
  kBool = 1u << 8,
  kFloat = kF32 | kF64,
  // Binary ops run f32 (activations are f32 on the GPU) and the index types.
  kArith = kF32 | kI32 | kI64,
  kSignedArith = kFloat | kI32 | kI64,
  kCastable = kFloat | kF16 | kBF16 | kI8 | kI32 | kI64 | kU8 | kBool,
};

// The op semantics shared with the CPU kernels.
namespace ops = cpu::elementwise;

// The dtypes of the kernels library's type sets (runtime/cpu/TypeSets.h)
// that `built` lists: unary ops are built for f32, f64 and the index types,
// binary ops for f32 (activations are f32 on the GPU) and the index types.
constexpr unsigned kUnaryBuilt = kFloat | kI32 | kI64 | kBool;
constexpr unsigned kBinaryBuilt = kF32 | kI32 | kI64 | kBool;
constexpr unsigned builtTypes(unsigned sets, unsigned built) {
  unsigned bits = ((sets & ops::kFloat) ? kFloat : 0u) | ((sets & ops::kSignedInt) ? kI8 | kI32 | kI64 : 0u) |
                  ((sets & ops::kUnsignedInt) ? kU8 : 0u) | ((sets & ops::kBool) ? kBool : 0u);
  return bits & built;
}

std::string typeSetName(unsigned set) {
  static const std::pair<unsigned, const char *> names[] = {
      {kF32, "f32"}, {kF64, "f64"}, {kF16, "f16"}, {kBF16, "bf16"}, {kI8, "i8"},
      {kI32, "i32"}, {kI64, "i64"}, {kU8, "u8"},   {kBool, "bool"}};
  std::string s;
  for (auto &[bit, name] : names)
    if (set & bit) s += (s.empty() ? "" : ", ") + std::string(name);
  return s;
}

llvm::Error unsupportedType(llvm::StringRef op, DType t, unsigned set) {
  return gpuKernelError(op, llvm::Twine("element type ") + dtypeName(t) + " is not supported by the CUDA kernel; " +
                                op + " takes " + typeSetName(set) + " tensors");
}

// Returns fn(Tag<T>{}) for dtype's C++ type when the dtype is in Set, else an
// unsupported-type error naming op.
template <unsigned Set, class Fn> llvm::Error dispatchType(DType t, llvm::StringRef op, Fn &&fn) {
  switch (t) {
  case DType::F32: if constexpr (bool(Set & kF32)) return fn(Tag<float>{}); break;
  case DType::F64: if constexpr (bool(Set & kF64)) return fn(Tag<double>{}); break;
  case DType::F16: if constexpr (bool(Set & kF16)) return fn(Tag<__half>{}); break;
  case DType::BF16: if constexpr (bool(Set & kBF16)) return fn(Tag<__nv_bfloat16>{}); break;
  case DType::I8: if constexpr (bool(Set & kI8)) return fn(Tag<int8_t>{}); break;
  case DType::I32: if constexpr (bool(Set & kI32)) return fn(Tag<int32_t>{}); break;
  case DType::I64: if constexpr (bool(Set & kI64)) return fn(Tag<int64_t>{}); break;
  case DType::U8: if constexpr (bool(Set & kU8)) return fn(Tag<uint8_t>{}); break;
  case DType::Bool: if constexpr (bool(Set & kBool)) return fn(Tag<uint8_t, true>{}); break;
  default: break;
  }
  return unsupportedType(op, t, Set);
}

// Returns fn(Tag<U>{}) for the unsigned integer U as wide as an element of t.
template <class Fn> llvm::Error dispatchBySize(DType t, llvm::StringRef op, Fn &&fn) {
  switch (dtypeSize(t)) {
  case 1: return fn(Tag<uint8_t>{});
  case 2: return fn(Tag<uint16_t>{});
  case 4: return fn(Tag<uint32_t>{});
  case 8: return fn(Tag<uint64_t>{});
  default: return gpuKernelError(op, llvm::Twine("unsupported element type ") + dtypeName(t));
  }
}

// ---------------------------------------------------------------------------
// Kernels

// The absent operand of unary and binary functors.
struct NoInput {};

// Every functor has kArity (1..3) and a __device__ operator() of that many
// arguments; it is built on the host and passed by value.
template <class F, class A, class B, class C> __device__ __forceinline__ auto call(const F &f, A a, B b, C c) {
  if constexpr (F::kArity == 1) return f(a);
  else if constexpr (F::kArity == 2) return f(a, b);
  else return f(a, b, c);
}

template <int V, class T> __device__ __forceinline__ VecOf<T, V> splat(T x) {
  VecOf<T, V> r;
#pragma unroll
  for (int j = 0; j < V; ++j) r.v[j] = x;
  return r;
}

// out[i] = f(a[i], b[i], c[i]) where input k is full-size when bit k of
// `full` is set and a single element otherwise. The first `groups` groups of
// 4 elements use vector accesses (0 when the buffers are not aligned for them).
template <class F, class R, class A, class B, class C>
__global__ void __launch_bounds__(kThreads)
    flatKernel(F f, R *out, const A *a, const B *b, const C *c, unsigned full, int64_t n, int64_t groups) {
  constexpr int N = F::kArity;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  const bool fa = full & 1u, fb = full & 2u, fc = full & 4u;
  A sa{};
  B sb{};
  C sc{};
  if (!fa) sa = a[0];
  if constexpr (N >= 2)
    if (!fb) sb = b[0];
  if constexpr (N >= 3)
    if (!fc) sc = c[0];
  for (int64_t g = first; g < groups; g += step) {
    const int64_t i = g * 4;
    VecOf<A, 4> va = fa ? *reinterpret_cast<const VecOf<A, 4> *>(a + i) : splat<4>(sa);
    VecOf<B, 4> vb{};
    VecOf<C, 4> vc{};
    if constexpr (N >= 2) vb = fb ? *reinterpret_cast<const VecOf<B, 4> *>(b + i) : splat<4>(sb);
    if constexpr (N >= 3) vc = fc ? *reinterpret_cast<const VecOf<C, 4> *>(c + i) : splat<4>(sc);
    VecOf<R, 4> o;
#pragma unroll
    for (int j = 0; j < 4; ++j) o.v[j] = static_cast<R>(call(f, va.v[j], vb.v[j], vc.v[j]));
    *reinterpret_cast<VecOf<R, 4> *>(out + i) = o;
  }
  for (int64_t i = groups * 4 + first; i < n; i += step) {
    A x = fa ? a[i] : sa;
    B y{};
    C z{};
    if constexpr (N >= 2) y = fb ? b[i] : sb;
    if constexpr (N >= 3) z = fc ? c[i] : sc;
    out[i] = static_cast<R>(call(f, x, y, z));
  }
}

// V elements of p starting at `off` (contiguous), or p[off] repeated.
template <int V, class T, class Offset>
__device__ __forceinline__ VecOf<T, V> loadRow(const T *p, Offset off, bool contiguous) {
  if (V > 1 && contiguous) return *reinterpret_cast<const VecOf<T, V> *>(p + off);
  return splat<V>(p[off]);
}

// out (dense, the broadcast shape) = f(inputs) where `calc` gives each input's
// offset at an output index. Each thread computes V consecutive outputs of one
// row (the innermost merged dim is a multiple of V).
template <int V, class Calc, class F, class R, class A, class B, class C>
__global__ void __launch_bounds__(kThreads)
    broadcastKernel(F f, R *out, const A *a, const B *b, const C *c, Calc calc, typename Calc::Index groups) {
  using I = typename Calc::Index;
  constexpr int N = F::kArity;
  const I step = I(gridDim.x) * blockDim.x;
  for (I g = I(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += step) {
    const I first = g * V;
    typename Calc::Offset off[N];
    calc.get(first, off);
    VecOf<A, V> va = loadRow<V>(a, off[0], calc.innerStride(0) != 0);
    VecOf<B, V> vb{};
    VecOf<C, V> vc{};
    if constexpr (N >= 2) vb = loadRow<V>(b, off[1], calc.innerStride(1) != 0);
    if constexpr (N >= 3) vc = loadRow<V>(c, off[2], calc.innerStride(2) != 0);
    VecOf<R, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = static_cast<R>(call(f, va.v[j], vb.v[j], vc.v[j]));
    *reinterpret_cast<VecOf<R, V> *>(out + first) = o;
  }
}

// ---------------------------------------------------------------------------
// Host side: broadcasting and launches

// The iteration space of `out` with each input's element strides (0 where it
// is broadcast), innermost dim first: the CPU's BroadcastPlan (size-1 output
// dims dropped, adjacent dims that every input has or lacks alike merged).
template <int N>
llvm::Expected<StridedSpace<N, kMaxBroadcastDims>> broadcastSpace(llvm::StringRef op, const Shape &out,
                                                                  const std::array<const DeviceTensor *, N> &ins) {
  std::vector<Shape> shapes;
  for (const DeviceTensor *t : ins) shapes.push_back(t->shape);
  const cpu::BroadcastPlan plan(out, shapes);
  const Shape &dims = plan.dims(); // outermost first
  if (dims.size() > size_t(kMaxBroadcastDims))
    return gpuKernelError(op, "broadcasting to " + shapeToString(out) + " needs " + llvm::Twine(dims.size()) +
                                  " dims after merging; the CUDA kernel handles at most " +
                                  llvm::Twine(kMaxBroadcastDims));
  StridedSpace<N, kMaxBroadcastDims> s;
  s.rank = int(dims.size());
  for (int d = 0; d < s.rank; ++d) {
    const size_t src = dims.size() - 1 - size_t(d); // innermost first
    s.sizes[d] = dims[src];
    for (int k = 0; k < N; ++k) s.strides[d][k] = plan.stride(size_t(k), src);
  }
  return s;
}

template <class T> const T *typedData(const DeviceTensor *t) { return t ? static_cast<const T *>(t->data) : nullptr; }

template <int V, bool Wide, class F, class R, class A, class B, class C, int N>
llvm::Error launchBroadcast(cudaStream_t stream, const F &f, R *out, const A *a, const B *b, const C *c,
                            const StridedSpace<N, kMaxBroadcastDims> &space, int64_t n) {
  using Calc = OffsetCalc<N, kMaxBroadcastDims, Wide>;
  Calc calc(space);
  const auto groups = typename Calc::Index(n / V);
  broadcastKernel<V, Calc, F, R, A, B, C><<<gridFor(groups, kThreads), kThreads, 0, stream>>>(f, out, a, b, c, calc,
                                                                                               groups);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

// out = f(ins...) where every input has out's element count (full) or is a
// single element: 4-wide where the full buffers are aligned for it.
template <class R, class A, class B, class C, class F>
llvm::Error launchFlat(cudaStream_t stream, const F &f, const DeviceTensor &out,
                       const std::array<const DeviceTensor *, F::kArity> &ins) {
  constexpr int N = F::kArity;
  const int64_t n = out.numel();
  if (n == 0) return llvm::Error::success();
  unsigned full = 0;
  for (int k = 0; k < N; ++k)
    if (ins[size_t(k)]->numel() == n) full |= 1u << k;
  R *po = static_cast<R *>(out.data);
  const A *pa = typedData<A>(ins[0]);
  const B *pb = nullptr;
  const C *pc = nullptr;
  if constexpr (N >= 2) pb = typedData<B>(ins[1]);
  if constexpr (N >= 3) pc = typedData<C>(ins[2]);
  bool vec = isAligned(po, sizeof(VecOf<R, 4>)) && (!(full & 1u) || isAligned(pa, sizeof(VecOf<A, 4>)));
  if constexpr (N >= 2) vec = vec && (!(full & 2u) || isAligned(pb, sizeof(VecOf<B, 4>)));
  if constexpr (N >= 3) vec = vec && (!(full & 4u) || isAligned(pc, sizeof(VecOf<C, 4>)));
  const int64_t groups = vec ? n / 4 : 0;
  const int64_t work = groups + (n - groups * 4);
  flatKernel<F, R, A, B, C><<<gridFor(work, kThreads), kThreads, 0, stream>>>(f, po, pa, pb, pc, full, n, groups);
  MEGAC_CUDA_LAUNCHED();
  return llvm::Error::success();
}

// y = f(x...) for inputs of y's shape (unary ops, Cast, GeluGrad): the flat
// kernel only.
template <class R, class A, class B = NoInput, class F>
llvm::Error launchMap(llvm::StringRef op, cudaStream_t stream, const F &f, const DeviceTensor &out,
                      const std::array<const DeviceTensor *, F::kArity> &ins) {
  static_assert(F::kArity <= 2, "launchMap takes one or two inputs");
  for (const DeviceTensor *t : ins)
    if (t->shape != out.shape)
      return gpuKernelError(op, "input " + shapeToString(t->shape) + " and output " + shapeToString(out.shape) +
                                    " differ in shape");
  return launchFlat<R, A, B, NoInput>(stream, f, out, ins);
}

// out = f(ins...) with ONNX multidirectional broadcasting of the inputs to
// out's shape. A, B, C are the inputs' element types, R the output's.
template <class R, class A, class B = NoInput, class C = NoInput, class F>
llvm::Error launchElementwise(llvm::StringRef op, cudaStream_t stream, const F &f, const DeviceTensor &out,
                              const std::array<const DeviceTensor *, F::kArity> &ins) {
  constexpr int N = F::kArity;
  const int64_t n = out.numel();
  bool flat = true;
  for (int k = 0; k < N; ++k) {
    const DeviceTensor *t = ins[size_t(k)];
    if (!cpu::broadcastsTo(t->shape, out.shape))
      return gpuKernelError(op, "input " + llvm::Twine(k) + " of shape " + shapeToString(t->shape) +
                                    " does not broadcast to the output shape " + shapeToString(out.shape));
    if (t->numel() != n && t->numel() != 1) flat = false;
  }
  if (n == 0) return llvm::Error::success();
  if (flat) return launchFlat<R, A, B, C>(stream, f, out, ins);

  auto space = broadcastSpace<N>(op, out.shape, ins);
  if (!space) return space.takeError();
  R *po = static_cast<R *>(out.data);
  const A *pa = typedData<A>(ins[0]);
  const B *pb = nullptr;
  const C *pc = nullptr;
  if constexpr (N >= 2) pb = typedData<B>(ins[1]);
  if constexpr (N >= 3) pc = typedData<C>(ins[2]);
  // Beyond 2^31 elements (rare): 64-bit index math, one element per thread.
  if (!fitsIn32Bits(*space)) return launchBroadcast<1, true>(stream, f, po, pa, pb, pc, *space, n);
  bool vec = space->sizes[0] % 4 == 0 && isAligned(po, sizeof(VecOf<R, 4>));
  for (int k = 0; k < N; ++k) {
    if (space->strides[0][k] == 0) continue;
    size_t bytes = k == 0 ? sizeof(VecOf<A, 4>) : k == 1 ? sizeof(VecOf<B, 4>) : sizeof(VecOf<C, 4>);
    vec = vec && isAligned(ins[size_t(k)]->data, bytes);
  }
  if (vec) return launchBroadcast<4, false>(stream, f, po, pa, pb, pc, *space, n);
  return launchBroadcast<1, false>(stream, f, po, pa, pb, pc, *space, n);
}

llvm::Error requireInputs(llvm::StringRef op, const GpuKernelContext &ctx, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!ctx.input(i)) return gpuKernelError(op, "input " + llvm::Twine(i) + " is missing");
  if (!ctx.output(0)) return gpuKernelError(op, "output 0 is missing");
  return llvm::Error::success();
}

llvm::Error copyDevice(llvm::StringRef op, GpuKernelContext &ctx, const DeviceTensor &in, const DeviceTensor &out) {
  if (in.dtype != out.dtype || in.shape != out.shape)
    return gpuKernelError(op, "the output must have the input's type and shape");
  if (out.data != in.data && out.nbytes() > 0)
    MEGAC_CUDA_TRY(cudaMemcpyAsync(out.data, in.data, out.nbytes(), cudaMemcpyDeviceToDevice, ctx.gpu.stream));
  return llvm::Error::success();
}

// ---------------------------------------------------------------------------
// Binary ops

template <class Op> llvm::Error binaryKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs(Op::name, ctx, 2)) return e;
  const DeviceTensor &a = *ctx.input(0), &b = *ctx.input(1);
  DeviceTensor &out = *ctx.output(0);
  if (a.dtype != b.dtype)
    return gpuKernelError(Op::name, llvm::Twine("inputs have different element types (") + dtypeName(a.dtype) +
                                        " and " + dtypeName(b.dtype) + ")");
  const DType want = Op::boolResult ? DType::Bool : a.dtype;
  if (out.dtype != want)
    return gpuKernelError(Op::name, llvm::Twine("the output must be ") + dtypeName(want) + ", not " +
                                        dtypeName(out.dtype));
  const Op op(ctx.attrs);
  return dispatchType<builtTypes(Op::types, kBinaryBuilt)>(a.dtype, Op::name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = std::conditional_t<Op::boolResult, uint8_t, T>;
    return launchElementwise<R, T, T>(Op::name, ctx.gpu.stream, op, out, {&a, &b});
  });
}

// y = x: the one-input form of the variadic ops, broadcast to the output.
struct CopyOp {
  static constexpr int kArity = 1;
  template <class T> __device__ __forceinline__ T operator()(T x) const { return x; }
};

// Max, Min, Sum, Mean over 1 or more inputs, folded left to right into the
// output (each step broadcasts the next input to the output), as the CPU.
template <class Op> llvm::Error variadicKernel(GpuKernelContext &ctx) {
  const char *name = Op::name;
  if (ctx.numInputs() == 0) return gpuKernelError(name, "needs at least one input");
  if (auto e = requireInputs(name, ctx, ctx.numInputs())) return e;
  DeviceTensor &out = *ctx.output(0);
  for (const DeviceTensor *in : ctx.inputs)
    if (in->dtype != out.dtype)
      return gpuKernelError(name, llvm::Twine("inputs have different element types (") + dtypeName(in->dtype) +
                                      " and " + dtypeName(out.dtype) + ")");
  const Op op(ctx.attrs);
  cudaStream_t s = ctx.gpu.stream;
  return dispatchType<builtTypes(Op::types, kBinaryBuilt)>(out.dtype, name, [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    if (ctx.numInputs() == 1) {
      if (auto e = launchElementwise<T, T>(name, s, CopyOp{}, out, {ctx.input(0)})) return e;
    } else {
      if (auto e = launchElementwise<T, T, T>(name, s, op, out, {ctx.input(0), ctx.input(1)})) return e;
      for (size_t i = 2; i < ctx.numInputs(); ++i)
        if (auto e = launchElementwise<T, T, T>(name, s, op, out, {&out, ctx.input(i)})) return e;
    }
    if constexpr (Op::isMean)
      return launchMap<T, T>(name, s, ops::MeanScaleOp{double(ctx.numInputs())}, out, {&out});
    else
      return llvm::Error::success();
  });
}


// ops::PowOp, with x^2 computed as x * x wherever the exponent is 2.
struct PowOp {
  static constexpr int kArity = 2;
  template <class T> __device__ __forceinline__ T operator()(T x, T y) const {
    if constexpr (std::is_floating_point_v<T>)
      if (y == T(2)) return x * x;
    return ops::PowOp{}(x, y);
  }
};

llvm::Error powKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs("Pow", ctx, 2)) return e;
  const DeviceTensor &base = *ctx.input(0), &exponent = *ctx.input(1);
  DeviceTensor &out = *ctx.output(0);
  if (out.dtype != base.dtype) return gpuKernelError("Pow", "the output must have the base's element type");
  cudaStream_t s = ctx.gpu.stream;
  if (base.dtype == exponent.dtype)
    return dispatchType<kArith>(base.dtype, "Pow", [&](auto tag) {
      using T = typename decltype(tag)::type;
      return launchElementwise<T, T, T>("Pow", s, PowOp{}, out, {&base, &exponent});
    });
  return dispatchType<kF32>(base.dtype, "Pow", [&](auto baseTag) {
    using T = typename decltype(baseTag)::type;
    return dispatchType<kI32 | kI64>(exponent.dtype, "Pow", [&](auto expTag) {
      using E = typename decltype(expTag)::type;
      return launchElementwise<T, T, E>("Pow", s, ops::PowMixedOp{}, out, {&base, &exponent});
    });
  });
}

// ---------------------------------------------------------------------------
// Unary ops

template <class Op> llvm::Error unaryKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs(Op::name, ctx, 1)) return e;
  const DeviceTensor &x = *ctx.input(0);
  DeviceTensor &y = *ctx.output(0);
  if (x.dtype != y.dtype || x.shape != y.shape)
    return gpuKernelError(Op::name, "the output must have the input's type and shape");
  const Op op(ctx.attrs);
  return dispatchType<builtTypes(Op::types, kUnaryBuilt)>(x.dtype, Op::name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launchMap<T, T>(Op::name, ctx.gpu.stream, op, y, {&x});
  });
}

template <class Op> llvm::Error predicateKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs(Op::name, ctx, 1)) return e;
  const DeviceTensor &x = *ctx.input(0);
  DeviceTensor &y = *ctx.output(0);
  if (y.dtype != DType::Bool || x.shape != y.shape)
    return gpuKernelError(Op::name, "the output must be a bool tensor of the input's shape");
  const Op op(ctx.attrs);
  return dispatchType<builtTypes(Op::types, kUnaryBuilt)>(x.dtype, Op::name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launchMap<uint8_t, T>(Op::name, ctx.gpu.stream, op, y, {&x});
  });
}

// megac.GeluGrad(dY, X) -> dY * Gelu'(X), in the input's precision.
struct GeluGradOp {
  static constexpr int kArity = 2;
  bool tanhApprox;
  template <class T> __device__ __forceinline__ T operator()(T dy, T x) const {
    if (tanhApprox) {
      const T k = T(0.7978845608028654), a = T(0.044715);
      T t = cpu::math::tanh(k * (x + a * x * x * x));
      T du = k * (T(1) + T(3) * a * x * x);
      return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
    }
    T cdf = T(0.5) * (T(1) + cpu::math::erf(x * T(0.7071067811865476)));
    T pdf = cpu::math::exp(T(-0.5) * x * x) * T(0.3989422804014327); // 1 / sqrt(2 pi)
    return dy * (cdf + x * pdf);
  }
};

llvm::Error geluGradKernel(GpuKernelContext &ctx) {
  const char *name = "megac.GeluGrad";
  if (auto e = requireInputs(name, ctx, 2)) return e;
  const DeviceTensor &dy = *ctx.input(0), &x = *ctx.input(1);
  DeviceTensor &dx = *ctx.output(0);
  if (dy.shape != x.shape || dy.dtype != x.dtype || dx.shape != x.shape || dx.dtype != x.dtype)
    return gpuKernelError(name, "dY " + shapeToString(dy.shape) + " and X " + shapeToString(x.shape) + " differ");
  std::string approx = ctx.attrs.getString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return gpuKernelError(name, "approximate must be \"none\" or \"tanh\", got \"" + approx + "\"");
  const GeluGradOp op{approx == "tanh"};
  return dispatchType<kFloat>(x.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launchMap<T, T, T>(name, ctx.gpu.stream, op, dx, {&dy, &x});
  });
}

// ---------------------------------------------------------------------------
// Cast, Where, Clip, Identity, Dropout

// f16/bf16 convert through f32 (as the CPU, which widens them to f32 tensors first).
template <class D, bool ToBool, class S> __device__ __forceinline__ D castValue(S v) {
  if constexpr (std::is_same_v<S, __half>) return castValue<D, ToBool>(__half2float(v));
  else if constexpr (std::is_same_v<S, __nv_bfloat16>) return castValue<D, ToBool>(__bfloat162float(v));
  else if constexpr (ToBool) return D(v != S(0));
  else if constexpr (std::is_same_v<D, __half>) return __float2half_rn(float(v));
  else if constexpr (std::is_same_v<D, __nv_bfloat16>) return __float2bfloat16_rn(float(v));
  else return ops::convertNumber<D>(v);
}

template <class D, bool ToBool> struct CastOp {
  static constexpr int kArity = 1;
  template <class S> __device__ __forceinline__ D operator()(S v) const { return castValue<D, ToBool>(v); }
};

// Cast and CastLike: the target type is the output's.
llvm::Error castKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs("Cast", ctx, 1)) return e;
  const DeviceTensor &x = *ctx.input(0);
  DeviceTensor &y = *ctx.output(0);
  if (x.shape != y.shape) return gpuKernelError("Cast", "the output must have the input's shape");
  if (x.dtype == y.dtype) return copyDevice("Cast", ctx, x, y);
  return dispatchType<kCastable>(x.dtype, "Cast", [&](auto srcTag) {
    using S = typename decltype(srcTag)::type;
    return dispatchType<kCastable>(y.dtype, "Cast", [&](auto dstTag) {
      using DTag = decltype(dstTag);
      using D = typename DTag::type;
      return launchMap<D, S>("Cast", ctx.gpu.stream, CastOp<D, DTag::isBool>{}, y, {&x});
    });
  });
}

// Where copies by element size: which value is taken does not depend on the type.
struct WhereOp {
  static constexpr int kArity = 3;
  template <class T> __device__ __forceinline__ T operator()(uint8_t c, T x, T y) const { return c ? x : y; }
};

llvm::Error whereKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs("Where", ctx, 3)) return e;
  const DeviceTensor &cond = *ctx.input(0), &x = *ctx.input(1), &y = *ctx.input(2);
  DeviceTensor &out = *ctx.output(0);
  if (cond.dtype != DType::Bool) return gpuKernelError("Where", "the condition must be a bool tensor");
  if (x.dtype != y.dtype || out.dtype != x.dtype)
    return gpuKernelError("Where", "X, Y and the output must have the same element type");
  return dispatchBySize(out.dtype, "Where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launchElementwise<T, uint8_t, T, T>("Where", ctx.gpu.stream, WhereOp{}, out, {&cond, &x, &y});
  });
}

// Clip(x, min?, max?): the bounds are read on the device (they need not be
// constants). With min > max every element becomes max; NaN passes through.
template <class T> struct ClipOp {
  static constexpr int kArity = 1;
  const T *lo, *hi;
  T lowDefault, highDefault;
  __device__ __forceinline__ T operator()(T v) const {
    const T low = lo ? *lo : lowDefault, high = hi ? *hi : highDefault;
    return ops::clipValue(v, low, high);
  }
};

llvm::Error clipKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs("Clip", ctx, 1)) return e;
  const DeviceTensor &x = *ctx.input(0);
  const DeviceTensor *lo = ctx.input(1), *hi = ctx.input(2);
  DeviceTensor &out = *ctx.output(0);
  for (const DeviceTensor *bound : {lo, hi}) {
    if (!bound) continue;
    if (bound->numel() != 1) return gpuKernelError("Clip", "min and max must be scalars");
    if (bound->dtype != x.dtype) return gpuKernelError("Clip", "min and max must have the input's element type");
  }
  if (out.dtype != x.dtype || out.shape != x.shape)
    return gpuKernelError("Clip", "the output must have the input's type and shape");
  return dispatchType<kSignedArith>(x.dtype, "Clip", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const ClipOp<T> op{typedData<T>(lo), typedData<T>(hi), std::numeric_limits<T>::lowest(),
                       std::numeric_limits<T>::max()};
    return launchMap<T, T>("Clip", ctx.gpu.stream, op, out, {&x});
  });
}

llvm::Error identityKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs("Identity", ctx, 1)) return e;
  return copyDevice("Identity", ctx, *ctx.input(0), *ctx.output(0));
}

// Dropout at inference: y = x and the optional mask is all true. Training
// mode (a true training_mode with a nonzero ratio) is refused, as on the CPU;
// both must then be plan constants.
llvm::Error dropoutKernel(GpuKernelContext &ctx) {
  if (auto e = requireInputs("Dropout", ctx, 1)) return e;
  if (ctx.input(2)) {
    const Tensor *training = ctx.constant(2);
    if (!training) return gpuKernelError("Dropout", "training_mode must be a constant");
    if (training->numel() == 1 && training->getAsDouble(0) != 0) {
      double r = 0.5;
      if (ctx.input(1)) {
        const Tensor *ratio = ctx.constant(1);
        if (!ratio) return gpuKernelError("Dropout", "ratio must be a constant when training_mode is true");
        if (ratio->numel() == 1) r = ratio->getAsDouble(0);
      }
      if (r != 0)
        return gpuKernelError("Dropout", "training_mode=true is not supported; megac runs Dropout for inference only");
    }
  }
  if (auto e = copyDevice("Dropout", ctx, *ctx.input(0), *ctx.output(0))) return e;
  if (DeviceTensor *mask = ctx.output(1)) {
    if (mask->dtype != DType::Bool) return gpuKernelError("Dropout", "the mask output must be a bool tensor");
    if (mask->nbytes() > 0) MEGAC_CUDA_TRY(cudaMemsetAsync(mask->data, 1, mask->nbytes(), ctx.gpu.stream));
  }
  return llvm::Error::success();
}

} // namespace megac::cuda::elementwise

namespace megac::cuda {

using namespace elementwise;

void registerElementwiseGpuKernels() {
  registerGpuKernel("Add", binaryKernel<ops::AddOp>);
  registerGpuKernel("Sub", binaryKernel<ops::SubOp>);
  registerGpuKernel("Mul", binaryKernel<ops::MulOp>);
  registerGpuKernel("Div", binaryKernel<ops::DivOp>);
  registerGpuKernel("Pow", powKernel);
  registerGpuKernel("Max", variadicKernel<ops::MaxOp>);
  registerGpuKernel("Min", variadicKernel<ops::MinOp>);
  registerGpuKernel("Sum", variadicKernel<ops::SumOp>);
  registerGpuKernel("Mean", variadicKernel<ops::MeanOp>);
  registerGpuKernel("Equal", binaryKernel<ops::EqualOp>);
  registerGpuKernel("Less", binaryKernel<ops::LessOp>);
  registerGpuKernel("LessOrEqual", binaryKernel<ops::LessOrEqualOp>);
  registerGpuKernel("Greater", binaryKernel<ops::GreaterOp>);
  registerGpuKernel("GreaterOrEqual", binaryKernel<ops::GreaterOrEqualOp>);
  registerGpuKernel("And", binaryKernel<ops::AndOp>);
  registerGpuKernel("Or", binaryKernel<ops::OrOp>);
  registerGpuKernel("Xor", binaryKernel<ops::XorOp>);

  registerGpuKernel("Sqrt", unaryKernel<ops::SqrtOp>);
  registerGpuKernel("Reciprocal", unaryKernel<ops::ReciprocalOp>);
  registerGpuKernel("Exp", unaryKernel<ops::ExpOp>);
  registerGpuKernel("Log", unaryKernel<ops::LogOp>);
  registerGpuKernel("Cos", unaryKernel<ops::CosOp>);
  registerGpuKernel("Sin", unaryKernel<ops::SinOp>);
  registerGpuKernel("Tanh", unaryKernel<ops::TanhOp>);
  registerGpuKernel("Erf", unaryKernel<ops::ErfOp>);
  registerGpuKernel("Floor", unaryKernel<ops::FloorOp>);
  registerGpuKernel("Ceil", unaryKernel<ops::CeilOp>);
  registerGpuKernel("Round", unaryKernel<ops::RoundOp>);
  registerGpuKernel("Sigmoid", unaryKernel<ops::SigmoidOp>);
  registerGpuKernel("Softplus", unaryKernel<ops::SoftplusOp>);
  registerGpuKernel("Softsign", unaryKernel<ops::SoftsignOp>);
  registerGpuKernel("HardSwish", unaryKernel<ops::HardSwishOp>);
  registerGpuKernel("Mish", unaryKernel<ops::MishOp>);
  registerGpuKernel("Gelu", unaryKernel<ops::GeluOp>);
  registerGpuKernel("LeakyRelu", unaryKernel<ops::LeakyReluOp>);
  registerGpuKernel("Elu", unaryKernel<ops::EluOp>);
  registerGpuKernel("Selu", unaryKernel<ops::SeluOp>);
  registerGpuKernel("HardSigmoid", unaryKernel<ops::HardSigmoidOp>);
  registerGpuKernel("Neg", unaryKernel<ops::NegOp>);
  registerGpuKernel("Relu", unaryKernel<ops::ReluOp>);
  registerGpuKernel("Abs", unaryKernel<ops::AbsOp>);
  registerGpuKernel("Sign", unaryKernel<ops::SignOp>);
  registerGpuKernel("Not", unaryKernel<ops::NotOp>);
  registerGpuKernel("IsNaN", predicateKernel<ops::IsNaNOp>);
  registerGpuKernel("IsInf", predicateKernel<ops::IsInfOp>);
  registerGpuKernel("megac.GeluGrad", geluGradKernel);

  registerGpuKernel("Cast", castKernel);
  registerGpuKernel("CastLike", castKernel);
  registerGpuKernel("Where", whereKernel);
  registerGpuKernel("Clip", clipKernel);
  registerGpuKernel("Identity", identityKernel);
  registerGpuKernel("Dropout", dropoutKernel);
}

} // namespace megac::cuda
