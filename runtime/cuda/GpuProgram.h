#pragma once
// Runs a plan Program on the GPU: the CUDA counterpart of
// runtime/ProgramRunner.h. Preparing checks that every op has a CUDA kernel,
// converts attributes once and takes each temporary's place in the arena
// from the plan (Program.arena_offsets). A prepared program is stateless:
// every unit of its template runs it with its own argument pointers
// (activations, the weight slot), so no per-layer state lives on the GPU.
#include "runtime/cuda/GpuKernel.h"
#include "runtime/plan/PlanIO.h"

namespace megac::cuda {

class GpuProgram {
public:
  // Constants are uploaded by bindConstants. `ctx` is the one the program
  // will run on: its mode (the plan's) and handles size the kernels' scratch
  // (bf16 operand packing; cuDNN's attention plans, built here).
  static llvm::Expected<GpuProgram> prepare(const plan::Program &p, const std::string &what, GpuContext &ctx);

  // Bytes this program's constants need in device memory (each 256-aligned).
  int64_t constantBytes() const;
  // Uploads each constant to regionBase + offsets[value id] (plan::constantsLayout)
  // and keeps the addresses.
  llvm::Error bindConstants(uint8_t *regionBase, const std::vector<int64_t> &offsets, cudaStream_t stream);

  int64_t arenaBytes() const { return arenaBytes_; }
  // The largest scratch any op asks for.
  size_t workspaceBytes() const { return workspaceBytes_; }

  // Runs on ctx.stream: `args` are device pointers in the program's argument
  // order; each result is copied to `results[i]` (device pointers) unless the
  // op already wrote it there. Results from `addFrom` on (fp32: a unit's
  // parameter gradients, a later micro-batch of the pass) are added to what
  // `results[i]` holds instead. Where it can, an op writes (or adds) a result
  // straight into `results[i]`; `results[i]` must then not be read as an
  // argument (run checks that the ranges are apart).
  llvm::Error run(GpuContext &ctx, void *arena, void *workspace, const std::vector<void *> &args,
                  const std::vector<void *> &results, size_t addFrom = SIZE_MAX) const;

  const std::string &name() const { return what_; }
  size_t numArguments() const { return arguments_.size(); }
  size_t numResults() const { return results_.size(); }
  // dtype and shape of argument i / result i (for the caller's checks).
  const DeviceTensor &argumentType(size_t i) const { return values_[size_t(arguments_[i])]; }
  const DeviceTensor &resultType(size_t i) const { return values_[size_t(results_[i])]; }

private:
  void findBindableResults();
  void findArgumentViews();

  struct Op {
    std::string type, name;
    const GpuKernel *kernel = nullptr;
    std::vector<int32_t> inputs, outputs;
    Attrs attrs;
  };
  std::string what_;
  bool backward_ = false; // a backward program (the op profile's label says so)
  std::vector<DeviceTensor> values_;   // data: arena offset (as a pointer-sized integer) until run
  std::vector<int64_t> offsets_;       // arena offset, -1 if not in the arena
  std::vector<Tensor> hostConstants_;  // host copies, indexed like values_
  std::vector<void *> constantAddr_;   // device copies, indexed like values_
  std::vector<Op> ops_;
  std::vector<int32_t> arguments_, results_;
  // Results the ops may write where the caller wants them instead of in the
  // arena (saving the copy out, or the sum into a later micro-batch's
  // gradient), per result: the values that share its bytes (it and the views
  // of one written value), the op that writes them (-1: the result is copied
  // out), and whether that op can add its value to what the caller's memory
  // holds (a Gemm without C and with alpha 1, nothing but the views reading
  // its value).
  struct BindableResult {
    std::vector<int32_t> values;
    int32_t writer = -1;
    bool writerOutput0 = false, addsInPlace = false;
  };
  std::vector<BindableResult> bindable_;
  // The views (Reshape and the like) of arguments, and of those views, in op
  // order: run points them at the argument's bytes instead of copying
  // (2.8B bench: the layer input's and the output gradient's, 20 ms a step).
  struct ArgumentView {
    int32_t in, out;
  };
  std::vector<ArgumentView> argumentViews_;
  // Per op, products only: how its inputs 0 and 1 use the pack cache
  // (LtGemm::cacheA/cacheB, from plan::packCacheUse).
  std::vector<std::array<uint8_t, 2>> packCache_;
  int64_t arenaBytes_ = 0;
  size_t workspaceBytes_ = 0;
};

// Results GpuProgram::run let their ops write straight into the caller's
// memory, and those of them the op added to the sum held there, so far in
// this process (tests read them).
uint64_t resultsWrittenInPlace();
uint64_t resultsAddedInPlace();
// Views of arguments GpuProgram::run let read the caller's bytes instead of
// copying them into the arena, so far in this process (tests read it).
uint64_t argumentViewsReadInPlace();

} // namespace megac::cuda
