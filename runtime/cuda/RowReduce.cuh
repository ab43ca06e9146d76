#pragma once
// Warp- and block-wide reductions shared by the reduction, softmax, norm and
// loss kernels, the online (max, sum of exp) pair of softmax-like rows, and
// the launch shapes and register-held row views of row kernels.
// Every reduction combines in a fixed order (xor butterflies, then warp
// results in warp order), so results are bitwise reproducible run to run,
// and every participating thread receives the same value. The names live in
// megac::cuda::rowops so that files with their own AddOp & co. can include it.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace megac::cuda::rowops {

constexpr int kWarpSize = 32;

__device__ __forceinline__ float shflXor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ double shflXor(double v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ int shflXor(int v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ long long shflXor(long long v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ long shflXor(long v, int mask) {
  return static_cast<long>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(v), mask));
}

// The running maximum m of a softmax row and the sum s of exp(x - m) over
// the elements seen so far. s == 0 while m == -inf (only -inf seen).
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum shflXor(MaxSum v, int mask) { return {shflXor(v.m, mask), shflXor(v.s, mask)}; }

__device__ __forceinline__ MaxSum maxSumIdentity() { return {-INFINITY, 0.f}; }

// Adds one element. -inf adds exp(-inf) = 0 and is skipped so that a row
// starting with -inf does not compute -inf - -inf. A row of only -inf keeps
// s == 0, and its softmax (exp(x - m) / s) is NaN, as on the CPU.
__device__ __forceinline__ MaxSum maxSumAdd(MaxSum a, float x) {
  if (x == -INFINITY) return a;
  if (x > a.m) return {x, a.s * expf(a.m - x) + 1.f};
  return {a.m, a.s + expf(x - a.m)};
}

// Symmetric in a and b (bitwise), so butterfly lanes agree.
__device__ __forceinline__ MaxSum maxSumCombine(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  float m = fmaxf(a.m, b.m);
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

struct MaxSumOp {
  __device__ __forceinline__ MaxSum operator()(MaxSum a, MaxSum b) const { return maxSumCombine(a, b); }
};

// fmaxf ignores a NaN operand, as the CPU's row maximum does.
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Two sums reduced at once: one block-wide reduction (two barriers) instead of two.
struct SumPair {
  float a, b;
};

__device__ __forceinline__ SumPair shflXor(SumPair v, int mask) { return {shflXor(v.a, mask), shflXor(v.b, mask)}; }

struct AddOp {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
  __device__ __forceinline__ SumPair operator()(SumPair x, SumPair y) const { return {x.a + y.a, x.b + y.b}; }
};

// All 32 lanes of the warp must call this; every lane gets the result.
template <class T, class Op> __device__ __forceinline__ T warpReduce(T v, Op op) {
#pragma unroll
  for (int mask = kWarpSize / 2; mask > 0; mask /= 2) v = op(v, shflXor(v, mask));
  return v;
}

// Reduces v over the whole block; every thread gets the result. blockDim.x
// must be a multiple of 32 (at most 1024) and blockDim.y == 1; `scratch` is a
// __shared__ array of 32 T. Synchronizes the block, so every thread of the
// block must call it (the same number of times).
template <class T, class Op> __device__ __forceinline__ T blockReduce(T v, Op op, T identity, T *scratch) {
  v = warpReduce(v, op);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, warps = blockDim.x / kWarpSize;
  __syncthreads(); // earlier readers of scratch are done
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : identity;
  return warpReduce(v, op);
}

// Reduction over the threads that share a row: the warp (kWarpPerRow) or the
// block. All threads of the group must call it.
template <bool kWarpPerRow, class T, class Op>
__device__ __forceinline__ T groupReduce(T v, Op op, T identity, T *scratch) {
  if constexpr (kWarpPerRow) return warpReduce(v, op);
  else return blockReduce(v, op, identity, scratch);
}

// In a row kernel launched by rowLaunchFor: the row this thread's group
// handles, the thread's index within the group and the group's size.
template <bool kWarpPerRow> struct RowThreads {
  int64_t row;
  int tid, count;
  __device__ RowThreads() {
    if constexpr (kWarpPerRow) {
      row = int64_t(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
      tid = threadIdx.x % kWarpSize;
      count = kWarpSize;
    } else {
      row = blockIdx.x;
      tid = threadIdx.x;
      count = blockDim.x;
    }
  }
};

// The elements of one row a thread visits (i = tid, tid + count, ...): held
// in registers when kPer > 0 (the row has at most kPer * count elements,
// so 32-bit indices do), read from memory on every pass when kPer == 0.
// Callbacks get the element's register slot (0 when streaming), its index
// and value(s).
template <int kPer> struct RowView {
  float v[kPer];
  int n, tid, count;

  __device__ RowView(const float *__restrict__ p, int64_t n_, int tid_, int count_)
      : n(int(n_)), tid(tid_), count(count_) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = tid + j * count;
      v[j] = i < n ? p[i] : 0.f;
    }
  }
  // f(slot, i, x[i]) for each element.
  template <class F> __device__ void forEach(F f) const {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = tid + j * count;
      if (i < n) f(j, int64_t(i), v[j]);
    }
  }
  // f(slot, i, x[i], other[i]) for each element.
  template <class F> __device__ void forEachWith(const RowView &other, F f) const {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = tid + j * count;
      if (i < n) f(j, int64_t(i), v[j], other.v[j]);
    }
  }
};

template <> struct RowView<0> {
  const float *p;
  int64_t n;
  int tid, count;

  __device__ RowView(const float *p_, int64_t n_, int tid_, int count_) : p(p_), n(n_), tid(tid_), count(count_) {}
  template <class F> __device__ void forEach(F f) const {
    for (int64_t i = tid; i < n; i += count) f(0, i, p[i]);
  }
  template <class F> __device__ void forEachWith(const RowView &other, F f) const {
    for (int64_t i = tid; i < n; i += count) f(0, i, p[i], other.p[i]);
  }
};

// Threads per row group and rows per block for a row kernel over rows of n
// elements, and perThread: the row elements each thread holds in registers
// (a power of two up to kMaxPerThread), or 0 where the row is too long and
// kernels stream it from memory. A warp per row (8 rows per block) up to 256
// elements; else a block per row, sized for 8 elements a thread up to 8K
// elements (row kernels are declared for 1024 threads, so at most 64
// registers: enough for 8 held elements), 1024 threads streaming beyond.
constexpr int kMaxPerThread = 8;
constexpr unsigned kMaxRowThreads = 1024;

struct RowLaunch {
  bool warpPerRow;
  unsigned threads; // blockDim.x
  unsigned rowsPerBlock;
  int perThread;
};

// The smallest power of two p <= kMaxPerThread with p * groupSize >= n, else 0.
inline int perThreadFor(int64_t n, int64_t groupSize) {
  int per = 1;
  while (per < kMaxPerThread && int64_t(per) * groupSize < n) per *= 2;
  return int64_t(per) * groupSize >= n ? per : 0;
}

// A block size (a multiple of 32) giving each thread about kMaxPerThread of n elements.
inline unsigned rowThreadsFor(int64_t n) {
  int64_t t = (n + kMaxPerThread - 1) / kMaxPerThread;
  t = (t + kWarpSize - 1) / kWarpSize * kWarpSize;
  return unsigned(t < kWarpSize ? kWarpSize : t > kMaxRowThreads ? kMaxRowThreads : t);
}

inline RowLaunch rowLaunchFor(int64_t n) {
  if (n <= 256) return {true, 256, 8, perThreadFor(n, kWarpSize)};
  const unsigned threads = rowThreadsFor(n);
  return {false, threads, 1, perThreadFor(n, threads)};
}

// Blocks for `rows` rows, grouped rowsPerBlock to a block.
inline unsigned rowBlocks(int64_t rows, const RowLaunch &l) {
  return unsigned((rows + l.rowsPerBlock - 1) / l.rowsPerBlock);
}

// Calls f(std::integral_constant<int, K>{}) with K = perThread (0, 1, 2, 4
// or 8), to instantiate a kernel template for it.
template <class F> void withPerThread(int perThread, F &&f) {
  switch (perThread) {
  case 0: f(std::integral_constant<int, 0>{}); break;
  case 1: f(std::integral_constant<int, 1>{}); break;
  case 2: f(std::integral_constant<int, 2>{}); break;
  case 4: f(std::integral_constant<int, 4>{}); break;
  default: f(std::integral_constant<int, 8>{}); break;
  }
}

// Calls f(std::integral_constant<bool, W>{}) with W = warpPerRow.
template <class F> void withWarpPerRow(bool warpPerRow, F &&f) {
  if (warpPerRow) f(std::true_type{});
  else f(std::false_type{});
}

} // namespace megac::cuda::rowops
