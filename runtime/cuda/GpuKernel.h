#pragma once
// CUDA kernels for plan ops, the GPU counterpart of runtime/cpu/Kernel.h.
// A kernel gets device views of its inputs and of its already-placed outputs
// (final dtype and shape), launches work on ctx.gpu.stream and returns; it
// never synchronizes, allocates device memory or copies to/from the host.
// Inputs that are plan constants are also given as host tensors (shape-like
// inputs such as Reshape's shape or Slice's starts are read from there).
#include "runtime/core/Attrs.h"
#include "runtime/core/Tensor.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#ifdef MEGAC_HAS_CUDNN
#include <cudnn_graph.h>
#else
typedef struct cudnnContext *cudnnHandle_t; // as cudnn_graph.h declares it
#endif

#include <array>
#include <string>
#include <vector>

namespace megac::cuda {

// How matrix products are computed. Tensors are fp32 in every mode; the mode
// picks the GEMM arithmetic (cuBLASLt compute type): bf16 inputs with fp32
// accumulation, tf32, or full fp32.
enum class ComputeMode { BF16, TF32, FP32 };
llvm::Expected<ComputeMode> parseComputeMode(llvm::StringRef s); // "bf16" | "tf32" | "fp32"
const char *computeModeName(ComputeMode m);

// A dense row-major tensor in device memory (not owned).
struct DeviceTensor {
  void *data = nullptr;
  DType dtype = DType::Undefined;
  Shape shape;

  int64_t numel() const { return numElements(shape); }
  size_t nbytes() const { return size_t(numel()) * dtypeSize(dtype); }
  template <class T> T *as() const { return static_cast<T *>(data); }
};

class OpTimer;

// What every kernel may use; owned by the runtime, one per compute stream.
struct GpuContext {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void *gemmWorkspace = nullptr; // for cuBLASLt heuristics
  size_t gemmWorkspaceBytes = 0;
  ComputeMode mode = ComputeMode::BF16;
  OpTimer *timer = nullptr; // --op-profile: GpuProgram times each op
  cudnnHandle_t dnn = nullptr; // bf16 attention through cuDNN; null: never used
  // Where the bf16 attention's fused forward leaves its bf16 Q, K, V, O and
  // softmax stats, past the kernels' scratch, for the gradient of the same
  // program run (CudnnAttention.h); null: nowhere, each gradient runs its own
  // forward. `stashOwner` says which forward left them.
  void *attentionStash = nullptr;
  size_t attentionStashBytes = 0;
  uint64_t programRun = 0; // GpuProgram::run counts its runs here
  // bf16 mode: ltMatmul's bf16 copy of the last A operand it packed, at the
  // start of the scratch it was given. A product that reads the same fp32
  // matrix (a layer's normed input, read by its q, k and v products) reuses it
  // instead of packing it again, while `packReuse` is on (GpuProgram::run
  // turns it on for its ops), `packEpoch` is unchanged (GpuProgram::run moves
  // it around every op but products and views, any of which may write the
  // source or the scratch) and no product has written over the source since.
  bool packReuse = false;
  uint64_t packEpoch = 1;
  struct PackedA {
    const void *src = nullptr, *dst = nullptr;
    int64_t rows = 0, cols = 0, ld = 0, stride = 0, batch = 0;
    uint64_t epoch = 0;
  } packedA;
  uint64_t packsReused = 0; // products that took packedA (tests read it)
  // bf16 mode: the pack cache (runtime/plan/PackCache.h), a part of the
  // WORKSPACE region (StreamSchedule.pack_cache_bytes): the bf16 copies that
  // a program's products stored for later products of the same run, one
  // after another from `base`. GpuProgram::run empties it around each run
  // and drops the copies whose source an op writes over (their bytes stay
  // taken until the run ends).
  struct PackCache {
    uint8_t *base = nullptr;
    size_t bytes = 0, top = 0;
    struct Entry {
      const void *src = nullptr;
      int64_t rows = 0, cols = 0, ld = 0, stride = 0, batch = 0;
      size_t srcBytes = 0;
      const void *copy = nullptr;
    };
    std::vector<Entry> entries;
    void clear() { top = 0, entries.clear(); }
    // Drops the copies of sources that overlap [p, p + n).
    void dropOverlapping(const void *p, size_t n);
  } packCache;
  // bf16 mode: the weight slots' bf16 copies (plan.proto's WEIGHT_COPY; the
  // trainer packs a unit's parameters into them with each PREFETCH). fp32
  // element i of [src, src + elems) has its bf16 copy at copy[i]; a product
  // operand stored without padding inside a slot is read from its copy
  // (ltMatmul: weightCopyOf) instead of being packed.
  struct WeightCopy {
    const float *src = nullptr;
    int64_t elems = 0;
    const void *copy = nullptr;
  };
  std::vector<WeightCopy> weightCopies;
  struct StashOwner {
    uint64_t run = 0;
    const void *q = nullptr, *k = nullptr, *v = nullptr; // the op's input identities in that run
    std::array<uint64_t, 9> problem{};
  } stashOwner;
};

// Creates ctx.dnn where megac was built with cuDNN (else leaves it null);
// false, with the reason in *why, if that failed (kernels then run without
// it). destroyDnnHandle drops the execution plans cached for the handle too.
bool createDnnHandle(GpuContext &ctx, std::string *why);
void destroyDnnHandle(GpuContext &ctx);

struct GpuKernelContext {
  const Attrs &attrs;
  GpuContext &gpu;
  std::vector<const DeviceTensor *> inputs; // nullptr for an omitted optional input
  std::vector<DeviceTensor *> outputs;      // placed by the caller; nullptr for an unused output
  std::vector<const Tensor *> constants;    // host copy of input i where it is a plan constant, else nullptr
  // Scratch device memory of the size the kernel's workspace function asked for.
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  // Output 0 is a program result written where the caller wants it
  // (GpuProgram::run binds it there), and, with `accumulateOutput`, it holds
  // a sum already: the op adds its value to it (a Gemm without C: C = A B + C,
  // rounded once, as the sum `C += A B` of the value would be).
  bool outputIsResult = false;
  bool accumulateOutput = false;
  // Products (MatMul, Gemm): how each of inputs 0 and 1 may use the pack
  // cache (GpuContext::packCache; LtGemm::cacheA/cacheB).
  std::array<uint8_t, 2> packCache{};

  size_t numInputs() const { return inputs.size(); }
  const DeviceTensor *input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  DeviceTensor *output(size_t i) const { return i < outputs.size() ? outputs[i] : nullptr; }
  const Tensor *constant(size_t i) const { return i < constants.size() ? constants[i] : nullptr; }
};

// The scratch a kernel needs for these inputs/outputs (data pointers may be
// null when this is asked at prepare time; shapes, dtypes and constants are set).
using GpuWorkspaceFn = size_t (*)(const GpuKernelContext &);
using GpuKernelFn = llvm::Error (*)(GpuKernelContext &);

struct GpuKernel {
  GpuKernelFn run = nullptr;
  GpuWorkspaceFn workspace = nullptr; // nullptr: needs none
};

void registerGpuKernel(llvm::StringRef opType, GpuKernelFn fn, GpuWorkspaceFn workspace = nullptr);
// nullptr if no CUDA kernel exists for opType.
const GpuKernel *lookupGpuKernel(llvm::StringRef opType);
// An error whose message is "OP: msg" (the same form as the CPU kernels').
llvm::Error gpuKernelError(llvm::StringRef opType, const llvm::Twine &msg);

// Each family registers its kernels (one file per family); the registry calls them once.
void registerElementwiseGpuKernels(); // ElementwiseKernels.cu
void registerShapeGpuKernels();       // ShapeKernels.cu
void registerReductionGpuKernels();   // ReductionKernels.cu
void registerSoftmaxGpuKernels();     // SoftmaxKernels.cu
void registerNormGpuKernels();        // NormKernels.cu
void registerRotaryGpuKernels();      // RotaryKernels.cu
void registerEmbeddingGpuKernels();   // EmbeddingKernels.cu (Gather, megac.GatherGrad)
void registerLossGpuKernels();        // LossKernels.cu (megac.SoftmaxCrossEntropy[Grad])
void registerLinearCrossEntropyGpuKernels(); // LinearCrossEntropyKernels.cu (megac.LinearCrossEntropy[Grad])
void registerMatMulGpuKernels();      // MatMulKernels.cu (MatMul, Gemm)
void registerAttentionGpuKernels();   // AttentionKernels.cu (Attention, megac.AttentionGrad)

// Launch shape helper: blocks of `threads` covering n items (capped grid, kernels grid-stride).
inline unsigned gridFor(int64_t n, unsigned threads = 256) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535 * 8) b = 65535 * 8;
  return unsigned(b);
}

// Whether float4 loads and stores may use p (nullptr, an absent optional
// operand, counts as aligned).
inline bool aligned16(const void *p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

} // namespace megac::cuda
