// A StreamSchedule message (the actions, events, slots and regions of one
// micro-batch) put in place of the llama fixture's own in its compiled plan,
// then the plan checker and one training step of the CPU stream executor
// (runtime/stream/StreamExecutor.h) under the input's own seed, every read
// checked, whether the checker accepts the schedule or not (its first two
// units step on the GPU while they stream). The templates
// stay the compiled ones, so what is fuzzed is the schedule's handling: the
// executor must answer any schedule with a step or an error, never a crash,
// an out-of-bounds access or a hang. Seeds: the fixture's schedule and its
// variants with more weight slots, with 2 micro-batches a pass and with its
// checkpoints offloaded (make_seeds.py).
#include "FuzzUtil.h"
#include "ProtoMutator.h"

#include "driver/Compile.h"
#include "runtime/plan/PlanChecker.h"
#include "runtime/plan/StreamLayout.h"
#include "runtime/train/Trainer.h"
#include "runtime/train/Weights.h"
#include "runtime/weights/WeightFiles.h"

namespace {

struct Fixture {
  megac::plan::Plan plan;
  megac::Tensor ids, targets;
  std::vector<float> params;
};

const Fixture &fixture() {
  static Fixture f = [] {
    using namespace megac;
    Fixture x;
    frontend::ImportOptions io;
    io.batch = 2;
    io.seq = 16;
    codegen::CodegenOptions co;
    co.compute = "fp32";
    co.schedule.residentUnits = 0; // every unit streams (the seeds: make_seeds.py),
    co.schedule.gpuAdamwUnits = 2; // embed and layer.0 stepped on the GPU: FETCH_MOMENTS, WRITEBACK
    auto p = driver::compileForTraining(std::string(MEGAC_SOURCE_DIR) + "/test/data/llama/model.onnx", io, {}, co);
    if (!p) {
      std::fprintf(stderr, "fuzz_stream_schedule: %s\n", llvm::toString(p.takeError()).c_str());
      std::abort();
    }
    x.plan = *p;
    auto t = runtime::Trainer::create(x.plan);
    auto w = t ? runtime::loadInitialWeights(x.plan, (*t)->state(), {}, runtime::fileWeightReaders()) : llvm::Expected<runtime::LoadedWeights>(t.takeError());
    if (!w) {
      std::fprintf(stderr, "fuzz_stream_schedule: %s\n", llvm::toString(w.takeError()).c_str());
      std::abort();
    }
    x.params = (*t)->state().params;
    x.ids = Tensor(DType::I64, {2, 16});
    x.targets = Tensor(DType::I64, {2, 16});
    for (int64_t i = 0; i < 32; ++i) x.ids.data<int64_t>()[i] = (i * 7) % 100, x.targets.data<int64_t>()[i] = (i * 5) % 100;
    return x;
  }();
  return f;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace megac;
  const Fixture &f = fixture();
  plan::StreamSchedule s;
  if (!s.ParseFromArray(data, int(size))) return 0;
  // What one step walks is the schedule's to claim, as a plan file's is: a
  // schedule past these sizes is a large plan, not a parser's input.
  if (s.actions_size() > 256 || s.events_size() > 256 || s.regions_size() > 256 || s.device_bytes() > (int64_t(1) << 28) ||
      s.grad_slot_bytes() > (int64_t(1) << 24) || s.weight_slots() > 64 || s.grad_slots() > 64 ||
      s.pinned_checkpoint_bytes() > (int64_t(1) << 24))
    return 0;
  // As many micro-batches a step as the schedule carries a pass (layer-major
  // accumulation), compiled so: one pass a step.
  const int perPass = plan::passMicroBatches(s);
  if (perPass > 8) return 0;
  plan::Plan p = f.plan;
  *p.mutable_schedule() = s;
  p.mutable_optimizer()->set_grad_accum(perPass);
  fuzz::discard(plan::checkPlan(p));
  runtime::CpuOptions o;
  o.checkReads = true;
  o.streamSeed = size; // another interleaving per input
  auto t = runtime::Trainer::create(p, o);
  if (!t) {
    std::string why = llvm::toString(t.takeError());
    if (std::getenv("MEGAC_FUZZ_VERBOSE")) std::fprintf(stderr, "fuzz_stream_schedule: %s\n", why.c_str());
    return 0;
  }
  (*t)->state().params = f.params;
  auto st = (*t)->step(std::vector<std::pair<Tensor, Tensor>>(size_t(perPass), {f.ids, f.targets}), 1e-3f);
  const std::string what = st ? std::string("a step") : llvm::toString(st.takeError());
  if (std::getenv("MEGAC_FUZZ_VERBOSE")) // what each input came to, for triage and the seeds' check
    std::fprintf(stderr, "fuzz_stream_schedule: %s\n", what.c_str());
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize, unsigned seed) {
  return megac::fuzz::mutateProto<megac::plan::StreamSchedule>(data, size, maxSize, seed);
}
