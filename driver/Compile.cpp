#include "driver/Compile.h"

#include "codegen/Budget.h"
#include "codegen/CheckpointOffloadPolicy.h"
#include "codegen/GpuAdamwPolicy.h"
#include "codegen/MicroBatchPolicy.h"
#include "codegen/RecomputePolicy.h"
#include "codegen/ResidentPolicy.h"
#include "codegen/UpdateOrderPolicy.h"
#include "codegen/WeightSlotsPolicy.h"
#include "codegen/WeightStreamPolicy.h"
#include "runtime/plan/PlanChecker.h"
#include "runtime/plan/UnitPrograms.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <numeric>
#include <vector>

namespace megac::driver {

using namespace codegen;

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

// Everything but the budget checks and the plan checker.
static llvm::Expected<plan::Plan> compilePlan(const std::string &modelPath, const frontend::ImportOptions &import,
                                              const passes::PassOptions &passOpts, const CodegenOptions &co) {
  auto g = frontend::importOnnx(modelPath, import);
  if (!g) return g.takeError();
  std::vector<std::string> pipeline = passes::importPipeline();
  for (const std::string &p : passes::lossPipeline(passOpts)) pipeline.push_back(p);
  for (const char *p : {"partition-units", "chunk-sequence", "verify"}) pipeline.push_back(p);
  if (auto e = passes::runPipeline(**g, pipeline, passOpts)) return std::move(e);
  CodegenOptions opts = co;
  opts.modelPath = modelPath;
  opts.ignoreIndex = passOpts.ignoreIndex;
  auto plan = buildPlan(**g, opts);
  if (!plan) return plan.takeError();
  if (auto e = plan::applyNoDecay(*plan)) return std::move(e);
  ScheduleOptions so = co.schedule;
  if (co.schedule.gpus > 1) {
    // The host sums every GPU's gradients: each unit's must reach it.
    if (co.schedule.residentUnits > 0)
      return err("--resident-units " + llvm::Twine(co.schedule.residentUnits) + " with --gpus " +
                 llvm::Twine(co.schedule.gpus) +
                 ": over several GPUs every unit streams (the host sums each GPU's gradients before its AdamW); "
                 "give --resident-units 0 or auto");
    if (co.schedule.gpuAdamwUnits > 0)
      return err("--gpu-adamw-units " + llvm::Twine(co.schedule.gpuAdamwUnits) + " with --gpus " +
                 llvm::Twine(co.schedule.gpus) +
                 ": over several GPUs every unit steps on the host, which sums each GPU's gradients first; "
                 "give --gpu-adamw-units 0 or auto");
    plan->set_gpus(co.schedule.gpus);
    so.residentUnits = so.gpuAdamwUnits = 0; // the autos' choice: none
  }
  // --weight-slots auto: the policies before it plan with 2 weight slots.
  const bool slotsAuto = so.weightSlots < 2;
  if (slotsAuto) so.weightSlots = 2;
  // Micro-batches per pass before resident units' auto, which fills the GPU
  // memory left; after an explicit --resident-units, which it must fit beside.
  const int perPass = so.microBatches;
  if (so.residentUnits >= 0) {
    so.microBatches = 1; // until the policy below sets it
    if (auto e = applyResidentPolicy(*plan, so)) return std::move(e);
    so.microBatches = perPass;
  }
  if (auto e = applyMicroBatchPolicy(*plan, so)) return std::move(e);
  if (so.residentUnits < 0)
    if (auto e = applyResidentPolicy(*plan, so)) return std::move(e);
  // The policies after the GPU AdamW's, whose auto judges its choices by the
  // plans they leave.
  auto finish = [&](plan::Plan &p, ScheduleOptions &o) -> llvm::Error {
    if (slotsAuto)
      if (auto e = applyWeightSlotsPolicy(p, o)) return e;
    const ScheduleOptions beforeOrder = o;
    if (auto e = applyUpdateOrderPolicy(p, o)) return e;
    return applyWeightStreamPolicy(p, o, beforeOrder);
  };
  // Before the recompute policy, whose auto fills the GPU memory left.
  if (auto e = applyGpuAdamwPolicy(*plan, so, finish)) return std::move(e);
  if (auto e = finish(*plan, so)) return std::move(e);
  if (auto e = applyRecomputePolicy(*plan, so)) return std::move(e);
  // Last: auto offloads checkpoints only where the plan is over budget.
  if (auto e = applyCheckpointOffloadPolicy(*plan, so)) return std::move(e);
  // The pack cache takes what the programs need of the GPU memory the
  // policies left.
  if (co.schedule.packCache) codegen::addPackCache(*plan);
  return plan;
}

// The options that give a plan its least GPU memory per token: every
// checkpoint offloaded where the flags allow offload (auto included), and
// none of the auto policies that fill the GPU memory a short plan leaves
// (resident units, kept activations, GPU AdamW): their bytes are not the
// tokens'.
static CodegenOptions leastPerToken(CodegenOptions co) {
  ScheduleOptions &so = co.schedule;
  if (so.offloadCheckpoints != 0) so.offloadCheckpoints = INT_MAX;
  if (so.residentUnits < 0) so.residentUnits = 0;
  if (so.gpuAdamwUnits < 0) so.gpuAdamwUnits = 0;
  if (so.recompute == Recompute::Auto) so.recompute = Recompute::All;
  return co;
}
// And the MLP blocks in as many slices as auto may choose (64, or the most
// powers of two that divide `seq`), where the flags allow chunking.
static constexpr int64_t kMaxAutoChunks = 64;
// Whether auto may run the MLP blocks in k slices at `seq`: k divides it and
// leaves slices of 64 tokens or more.
static bool autoSlicesApply(int64_t seq, int64_t k) { return seq % k == 0 && seq / k >= 64; }
static passes::PassOptions leastPerToken(passes::PassOptions po, int64_t seq) {
  if (po.sequenceChunks != 1) po.sequenceChunks = std::gcd(seq, kMaxAutoChunks);
  return po;
}

static frontend::ImportOptions atShape(frontend::ImportOptions io, int64_t batch, int64_t seq) {
  io.batch = batch;
  io.seq = seq;
  if (io.firstInputShape && io.firstInputShape->size() >= 2) {
    (*io.firstInputShape)[0] = batch;
    (*io.firstInputShape)[1] = seq;
  }
  return io;
}

// Past this many tokens a compile materializes enough (masks, position
// tables, the planner's arrays) to take seconds and gigabytes, so the shape
// is first checked against the GPU budget by arithmetic.
static constexpr int64_t kCheckTokensAbove = int64_t(1) << 17;
static constexpr int kMaxTokensLog2 = 40;

static std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(int64_t(1) << 30));
  return buf;
}

// Refuses a batch x seq whose GPU memory is well past the budget before a
// compile at that size materializes anything. Device bytes grow about
// linearly with the tokens past a few thousand (every unit's boundary
// activations, the layer's recomputed values, attention's scratch), but not
// below: the fused loss's logits chunk and other buffers grow with the rows
// only up to their caps, so a slope taken at a short seq overstates the long
// one's (the 7B Llama-2 shape: 414 KB a token between seq 64 and 128, 214 KB
// between 1,024 and 4,096, 346 KB between 65,536 and 131,072). The slope is
// taken between compiles at batch 1 and 2 x a seq of up to kSlopeSeq tokens,
// checkpoints offloaded and MLP slices where the flags allow; a shape whose
// line is within kEstimateSlack of the budget is compiled, and the compile decides.
static constexpr int64_t kSlopeSeq = 8192;
static constexpr double kEstimateSlack = 1.15;
static llvm::Error checkTokensFit(const std::string &modelPath, const frontend::ImportOptions &import,
                                  const passes::PassOptions &passOpts, const CodegenOptions &co) {
  const int64_t B = import.batch, S = import.seq;
  if (B <= 0 || S <= 0) return llvm::Error::success();
  const double tokens = double(B) * double(S);
  const double maxTokens = double(int64_t(1) << kMaxTokensLog2);
  if (tokens <= double(kCheckTokensAbove)) return llvm::Error::success();
  const int64_t s0 = std::min<int64_t>(S, kSlopeSeq);
  auto p1 = compilePlan(modelPath, atShape(import, 1, s0), leastPerToken(passOpts, s0), leastPerToken(co));
  auto p2 = compilePlan(modelPath, atShape(import, 2, s0), leastPerToken(passOpts, s0), leastPerToken(co));
  if (!p1 || !p2) { // the compile at the real shape reports what is wrong
    if (!p1) llvm::consumeError(p1.takeError());
    if (!p2) llvm::consumeError(p2.takeError());
    if (tokens <= maxTokens) return llvm::Error::success();
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--batch " + std::to_string(B) + " x --seq " + std::to_string(S) +
                                       " is more than 2^" + std::to_string(kMaxTokensLog2) + " tokens a step");
  }
  const double base = double(p1->schedule().device_bytes());
  const double perToken = std::max(0.0, double(p2->schedule().device_bytes()) - base) / double(s0);
  const double budget = double(p1->schedule().gpu_budget_bytes());
  const double about = base + perToken * (tokens - double(s0));
  if (tokens <= maxTokens && about <= budget * kEstimateSlack) return llvm::Error::success();
  auto most = [&](int64_t other) {
    double fit = perToken > 0 ? (budget - base + perToken * double(s0)) / (perToken * double(other)) : maxTokens;
    return int64_t(std::max(0.0, std::min(fit, maxTokens / double(other))));
  };
  std::string first = about > budget * kEstimateSlack
                          ? "batch " + std::to_string(B) + " x seq " + std::to_string(S) + " needs about " +
                                gib(about) + " of GPU memory (" + std::to_string(int64_t(perToken)) +
                                " bytes a token, from compiles at batch 1 and 2 x seq " + std::to_string(s0) +
                                "); the budget (--gpu-mem) is " + gib(budget)
                          : "batch " + std::to_string(B) + " x seq " + std::to_string(S) + " is more than 2^" +
                                std::to_string(kMaxTokensLog2) + " tokens a step";
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 first + "\nlargest batch that fits at seq " + std::to_string(S) + ": about " +
                                     std::to_string(std::min(most(S), B - 1)) + "\nlargest seq that fits at batch " +
                                     std::to_string(B) + ": about " + std::to_string(std::min(most(B), S - 1)));
}

// --seq-chunks auto (sequenceChunks < 0): whole where the plan fits the GPU
// budget (and --host-mem), else the fewest of 2, 4, 8, ... 64 (dividing seq,
// chunks of 64 tokens or more) that make it fit, or the most where none does. Past 64
// slices the MLP's share of a layer's memory is small beside attention's.
// Each try is a compile (a minute or more at 7B and 512k tokens), so after
// two slices the most go next: where they do not fit, no fewer will (the
// slices' bytes fall as they multiply); where they do, bisection finds the
// fewest.
static llvm::Expected<plan::Plan> compileChunked(const std::string &modelPath, const frontend::ImportOptions &import,
                                                 passes::PassOptions passOpts, const CodegenOptions &co) {
  const bool autoChunks = passOpts.sequenceChunks < 0;
  if (autoChunks) passOpts.sequenceChunks = 1;
  auto plan = compilePlan(modelPath, import, passOpts, co);
  if (!plan || !autoChunks) return plan;
  // Within --host-mem too: more slices need fewer checkpoints offloaded to
  // pinned host memory (auto's), so a plan past the host budget whole may
  // fit it in slices.
  auto fits = [&](const plan::Plan &p) {
    return p.schedule().device_bytes() <= p.schedule().gpu_budget_bytes() &&
           fitsHostBudget(p, co.schedule.hostBudgetBytes);
  };
  if (fits(*plan)) return plan;
  std::vector<int64_t> counts; // 2, 4, ... that apply at this seq
  for (int64_t k = 2; k <= kMaxAutoChunks && autoSlicesApply(import.seq, k); k *= 2) counts.push_back(k);
  if (counts.empty()) return plan;
  auto at = [&](size_t i) {
    passOpts.sequenceChunks = counts[i];
    return compilePlan(modelPath, import, passOpts, co);
  };
  // Two slices first (what a plan a little over the budget takes), then
  // the most: where they do not fit, no fewer will.
  auto two = at(0);
  if (!two || fits(*two) || counts.size() == 1) return two;
  auto most = at(counts.size() - 1);
  if (!most || !fits(*most)) return most;
  // counts[hi] fits; counts[lo] does not (tried above).
  int64_t lo = 0, hi = int64_t(counts.size()) - 1;
  plan::Plan best = std::move(*most);
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    auto p = at(size_t(mid));
    if (!p) return p.takeError();
    if (fits(*p)) hi = mid, best = std::move(*p);
    else lo = mid;
  }
  return best;
}

llvm::Expected<plan::Plan> compileForTraining(const std::string &modelPath, const frontend::ImportOptions &import,
                                              const passes::PassOptions &passOpts, const CodegenOptions &co) {
  if (auto e = checkTokensFit(modelPath, import, passOpts, co)) return std::move(e);
  auto plan = compileChunked(modelPath, import, passOpts, co);
  if (!plan) return plan.takeError();
  if (plan->schedule().device_bytes() > plan->schedule().gpu_budget_bytes()) {
    // At batch 1 the longest seq is --longest-seq's search, which counts
    // auto's slices and offload in and takes a dozen compiles at most; a
    // bisection of plain compiles would take ~log2(seq) and leave them out.
    LongestSeqBelow longest;
    if (import.batch == 1)
      longest = [&](int64_t below) -> llvm::Expected<SeqThatFits> {
        auto l = longestSeqAtBatch1(modelPath, import, passOpts, co);
        if (!l) return l.takeError();
        return SeqThatFits{std::min(l->seq, below - 1), " (within 1%; megac compile --longest-seq)" +
                                                            howItFits(*l, passOpts.sequenceChunks < 0)};
      };
    return overBudgetError(
        *plan,
        [&](int64_t batch, int64_t seq) -> llvm::Expected<int64_t> {
          auto smaller = compilePlan(modelPath, atShape(import, batch, seq), passOpts, co);
          if (!smaller) return smaller.takeError();
          return smaller->schedule().device_bytes();
        },
        longest);
  }
  if (co.schedule.hostBudgetBytes > 0)
    if (auto e = checkHostBudget(*plan, co.schedule.hostBudgetBytes)) return std::move(e);
  if (auto e = plan::checkPlan(*plan))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "internal error: the compiled plan fails the plan checker: " +
                                       llvm::toString(std::move(e)));
  return plan;
}

llvm::Expected<LongestSeq> longestSeqAtBatch1(const std::string &modelPath, const frontend::ImportOptions &import,
                                              const passes::PassOptions &passOpts, const CodegenOptions &asked) {
  // Without the pack cache, which takes what the budget leaves (up to what
  // the programs need): it would hide the GPU bytes a token costs.
  CodegenOptions co = asked;
  co.schedule.packCache = false;
  LongestSeq out;
  // An estimate from the least GPU memory per token (checkpoints offloaded
  // where allowed), then compiles as the flags ask close in on the length;
  // a length fits where its plan fits the GPU budget and --host-mem, where
  // given (offloaded checkpoints take pinned host memory).
  bool hostFits = true;
  const int64_t s0 = 64, budget = co.schedule.gpuBudgetBytes;
  // One compile at batch 1 x seq: with `po` as given, or with auto's slice
  // tries (compileChunked) where `tryChunks`.
  auto bytesAt = [&](int64_t seq, const passes::PassOptions &po, const CodegenOptions &opts,
                     bool tryChunks = false) -> llvm::Expected<int64_t> {
    ++out.compiles;
    auto p = tryChunks ? compileChunked(modelPath, atShape(import, 1, seq), po, opts)
                       : compilePlan(modelPath, atShape(import, 1, seq), po, opts);
    if (!p) return p.takeError();
    out.pinnedCheckpointBytes = p->schedule().pinned_checkpoint_bytes();
    out.sequenceChunks = plan::sequenceChunks(*p);
    hostFits = fitsHostBudget(*p, co.schedule.hostBudgetBytes);
    return p->schedule().device_bytes();
  };
  auto b1 = bytesAt(s0, leastPerToken(passOpts, s0), leastPerToken(co));
  if (!b1) return b1.takeError();
  if (*b1 > budget) return out;
  auto b2 = bytesAt(2 * s0, leastPerToken(passOpts, s0), leastPerToken(co));
  if (!b2) return b2.takeError();
  double perToken = std::max(1.0, double(*b2 - *b1) / double(s0));
  double base = double(*b1), baseSeq = double(s0);
  const double maxSeq = double(int64_t(1) << kMaxTokensLog2);
  // Short lengths overstate the slope (checkTokensFit says why): where the
  // line reaches past kSlopeSeq, the slope between kSlopeSeq and twice it.
  if (baseSeq + (double(budget) - base) / perToken > double(4 * kSlopeSeq)) {
    auto l1 = bytesAt(kSlopeSeq, leastPerToken(passOpts, kSlopeSeq), leastPerToken(co));
    auto l2 = bytesAt(2 * kSlopeSeq, leastPerToken(passOpts, 2 * kSlopeSeq), leastPerToken(co));
    if (!l1) return l1.takeError();
    if (!l2) return l2.takeError();
    if (*l2 <= budget && *l2 > *l1) {
      perToken = double(*l2 - *l1) / double(kSlopeSeq);
      base = double(*l2);
      baseSeq = double(2 * kSlopeSeq);
    }
  }
  out.bytesPerToken = int64_t(perToken);
  // Lengths tried are multiples of 64, and of an explicit --seq-chunks K, which must divide them.
  const int64_t step = passOpts.sequenceChunks > 1 ? std::lcm(s0, passOpts.sequenceChunks) : s0;
  auto down = [&](double seq) { return int64_t(std::min(seq, maxSeq)) / step * step; };
  out.seq = s0;
  out.deviceBytes = *b1;
  out.pinnedCheckpointBytes = 0;
  out.sequenceChunks = 1;
  // The line's length, then compiles as the flags ask: while none has failed,
  // 5% longer; while none has fit, 10% shorter; then halving the bracket
  // [lo, hi) to 1% (or one step), 8 compiles at most. The auto policies fill
  // whatever GPU memory a plan leaves, so only fit or not is read from them.
  LongestSeq best = out;
  int64_t lo = 0, hi = 0, seq = down(baseSeq + (double(budget) - base) / perToken);
  for (int tries = 0; tries < 8 && seq >= step && seq > lo && (hi == 0 || seq < hi); ++tries) {
    // Auto's most slices outright where they apply: a length fits with
    // auto's slices exactly where it fits with 64 (auto stops at the fewest
    // that fit), and each count auto tries is a compile.
    const bool most = passOpts.sequenceChunks < 0 && autoSlicesApply(seq, kMaxAutoChunks);
    auto b = most ? bytesAt(seq, leastPerToken(passOpts, seq), co) : bytesAt(seq, passOpts, co, true);
    if (!b) return b.takeError();
    if (*b <= budget && hostFits) {
      lo = seq;
      best = out; // bytesAt recorded this plan's offload and slices
      best.seq = seq;
      best.deviceBytes = *b;
    } else {
      hi = seq;
    }
    if (hi == 0) seq = down(double(lo) * 1.05);
    else if (lo == 0) seq = down(double(hi) * 0.9);
    else if (hi - lo <= std::max(step, lo / 100)) break;
    else seq = down(double(lo + hi) / 2);
  }
  best.compiles = out.compiles;
  best.bytesPerToken = out.bytesPerToken;
  return best;
}

std::string howItFits(const LongestSeq &l, bool autoChunks) {
  std::string out;
  if (l.seq && l.pinnedCheckpointBytes) {
    char gib[32];
    std::snprintf(gib, sizeof gib, "%.2f", double(l.pinnedCheckpointBytes) / double(int64_t(1) << 30));
    out += std::string(", with ") + gib + " GiB of checkpoints offloaded to pinned host memory";
  }
  if (l.seq && l.sequenceChunks > 1)
    out += ", the MLP blocks in " + std::to_string(l.sequenceChunks) + " slices of the sequence" +
           (autoChunks ? " (or the fewer that auto takes where they fit)" : "");
  return out;
}

} // namespace megac::driver
