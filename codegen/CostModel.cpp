#include "codegen/CostModel.h"

#include "runtime/cpu/NormAttentionShapes.h"
#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/Bf16Weights.h"
#include "runtime/plan/FusedAttention.h"
#include "runtime/plan/PackCache.h"
#include "runtime/plan/StreamLayout.h"
#include "runtime/plan/TokenRows.h"
#include "runtime/plan/UnitPrograms.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace megac::plan {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

const char *laneName(int lane) {
  switch (lane) {
  case kLaneH2D: return "H2D";
  case kLaneCompute: return "compute";
  case kLaneD2H: return "D2H";
  case kLaneCPU: return "CPU";
  default: return "unknown";
  }
}

// --- the work of a program ---


static int64_t numel(const TensorType &t) {
  int64_t n = 1;
  for (int64_t d : t.shape()) n *= d;
  return n;
}

// The value `id` of p, or nullptr where the op omits it.
static const Program::Value *valueAt(const Program &p, int32_t id) {
  return id >= 0 && id < p.values_size() ? &p.values(id) : nullptr;
}

// The work of Attention(Q, K, V, mask?, past_key?, past_value?, nonpad?) or
// megac.AttentionGrad(dY, Q, K, V, mask?, nonpad?). Flops: per head and query
// row, Q*K^T is 2*Skv*D flops and P*V 2*Skv*Dv. The backward recomputes Q*K^T
// and runs four more products (dV, dP, dQ, dK): 2*Skv*(3D + 2Dv).
// - Fused (bf16 plans, plan::runsFused): attention flops, halved by a causal
//   mask (the kernel skips the masked blocks), and the elements of Q (B Hq
//   Sq D), once for the forward and twice for the gradient: what the work
//   beyond the flops (conversions, dQ's accumulator) grows with. A gradient
//   whose unit keeps its activations runs its own forward as well (no
//   recomputed forward leaves it one): not counted.
// - On materialized scores: GEMM flops, every score computed, and the score
//   matrices' bytes: written, softmaxed in place and read by P V forward (16
//   bytes per score); recomputed, softmaxed, read by dV, dP written, turned
//   into dS and read by dQ and dK in the gradient (40).
static llvm::Error attentionWork(const Program &p, const Program::Op &op, bool bf16, ProgramWork &w) {
  const bool grad = op.type() == "megac.AttentionGrad";
  auto d = attentionOpDims(p, op);
  if (!d) return d.takeError();
  double rows = double(d->batch) * double(d->qHeads) * double(d->qSeq) * double(d->totalSeq);
  double perRow = grad ? 2.0 * (3.0 * double(d->headSize) + 2.0 * double(d->vHeadSize))
                       : 2.0 * (double(d->headSize) + double(d->vHeadSize));
  if (bf16 && runsFused(*d, attentionOperandsPlain(p, op))) {
    w.attentionFlops += rows * perRow * (d->causal ? 0.5 : 1.0);
    w.attentionElements +=
        (grad ? 2.0 : 1.0) * double(d->batch) * double(d->qHeads) * double(d->qSeq) * double(d->headSize);
  } else {
    w.gemmFlops += rows * perRow;
    w.memoryBytes += (grad ? 40.0 : 16.0) * rows;
  }
  return llvm::Error::success();
}

// Bytes an op reads and writes. Gather reads only the rows it gathers.
static double memoryBytes(const Program &p, const Program::Op &op) {
  double bytes = 0;
  for (int i = 0; i < op.inputs_size(); ++i) {
    const Program::Value *v = valueAt(p, op.inputs(i));
    if (!v) continue;
    if (op.type() == "Gather" && i == 0) continue; // counted as the output's bytes below
    bytes += double(tensorBytes(v->type()));
  }
  for (int32_t o : op.outputs())
    if (const Program::Value *v = valueAt(p, o)) bytes += double(tensorBytes(v->type()));
  if (op.type() == "Gather" && op.outputs_size() > 0)
    if (const Program::Value *v = valueAt(p, op.outputs(0))) bytes += double(tensorBytes(v->type()));
  return bytes;
}

// A view of a TEMP shares its bytes (ArenaRules.h): it moves nothing.
static bool viewSharesBytes(const Program &p, const Program::Op &op) {
  if (!isViewOp(op.type()) || op.inputs_size() == 0) return false;
  const Program::Value *in = valueAt(p, op.inputs(0));
  return in && in->kind() == Program::Value::TEMP;
}

// megac.LinearCrossEntropy[Grad] (h [..., H], W [H, V] or [V, H] with
// trans_w): the head's products, 2*N*H*V flops forward and 6*N*H*V for the
// gradient (the logits recomputed, then dh and dW). Bytes: the operands and
// results, the chunks of fp32 logits through the workspace (written, then
// read: twice more in the gradient, which rewrites them as dlogits), and in
// bf16 plans W packed once (unless the runtime copied it beforehand) plus the
// chunk operands packed per product.
static llvm::Error linearCrossEntropyWork(const Program &p, const Program::Op &op, bool bf16Operands,
                                          bool wCopied, ProgramWork &w) {
  const bool grad = op.type() == "megac.LinearCrossEntropyGrad";
  const int first = grad ? 1 : 0;
  const Program::Value *h = op.inputs_size() > first + 1 ? valueAt(p, op.inputs(first)) : nullptr;
  const Program::Value *wt = h ? valueAt(p, op.inputs(first + 1)) : nullptr;
  if (!h || !wt || h->type().shape_size() == 0 || wt->type().shape_size() != 2)
    return err("op '" + op.name() + "' (" + op.type() + ") lacks h or a 2-D W");
  const double hidden = double(h->type().shape(h->type().shape_size() - 1));
  const double rows = hidden > 0 ? double(numel(h->type())) / hidden : 0.0;
  const double weights = double(numel(wt->type())), vocab = hidden > 0 ? weights / hidden : 0.0;
  const double flops = (grad ? 6.0 : 2.0) * rows * weights;
  w.gemmFlops += flops;
  w.memoryBytes += memoryBytes(p, op) + (grad ? 16.0 : 8.0) * rows * vocab;
  if (bf16Operands)
    w.memoryBytes += 6.0 * ((wCopied ? 0.0 : weights) + rows * hidden + (grad ? 2.0 * rows * vocab : 0.0));
  return llvm::Error::success();
}

CopiedArguments copiedWeightArguments(const Plan &p, int unit) {
  CopiedArguments copied;
  if (!p.has_schedule()) return copied;
  copied.packCacheBytes = p.schedule().pack_cache_bytes();
  if (p.schedule().weight_copy_bytes() == 0 || unit < 0 || unit >= p.units_size() || p.units(unit).resident())
    return copied;
  const Unit &u = p.units(unit);
  if (u.template_id() < 0 || u.template_id() >= p.templates_size()) return copied;
  const Template &t = p.templates(u.template_id());
  copied.begin = t.num_activation_inputs();
  copied.end = t.num_activation_inputs() + t.num_parameters();
  return copied;
}

llvm::Error forEachOpWork(const Program &p, bool bf16Operands, CopiedArguments copied,
                          llvm::function_ref<void(const Program::Op &, const ProgramWork &)> each) {
  // The runtime packs a product's A once for consecutive products that read
  // it alike (only products and views between: GpuContext::packedA): the
  // last packed A as (the value whose bytes it is, its shape, transA).
  const std::vector<int32_t> root = viewRoots(p);
  // Values read as bf16 copies made before the program runs: never packed.
  std::vector<bool> isCopy(static_cast<size_t>(p.values_size()), false);
  for (int i = std::max(copied.begin, 0); i < std::min(copied.end, p.arguments_size()); ++i)
    if (int32_t v = p.arguments(i); v >= 0 && v < p.values_size()) isCopy[size_t(v)] = true;
  auto packedElems = [&](int32_t id, const Program::Value *v) {
    return id >= 0 && isCopy[size_t(root[size_t(id)])] ? 0 : numel(v->type());
  };
  // The pack cache (runtime/plan/PackCache.h): the copies products stored
  // there, one after another while the region has room.
  const PackCacheUse cacheUse = bf16Operands && copied.packCacheBytes > 0 ? packCacheUse(p) : PackCacheUse{};
  std::set<int32_t> cached; // operands (PackCacheUse::operand)
  int64_t cacheTop = 0;
  std::string lastPackedA;
  for (int at = 0; at < p.ops_size(); ++at) {
    const Program::Op &op = p.ops(at);
    for (int32_t id : op.inputs())
      if (id < -1 || id >= p.values_size()) return err("op '" + op.name() + "' reads value " + llvm::Twine(id) + ", which does not exist");
    for (int32_t id : op.outputs())
      if (id < -1 || id >= p.values_size()) return err("op '" + op.name() + "' writes value " + llvm::Twine(id) + ", which does not exist");
    const std::string &type = op.type();
    ProgramWork w;
    if (type == "MatMul" || type == "Gemm") {
      // 2*K flops per output element; K is A's last dim (its first with transA).
      const Program::Value *a = op.inputs_size() > 0 ? valueAt(p, op.inputs(0)) : nullptr;
      const Program::Value *y = op.outputs_size() > 0 ? valueAt(p, op.outputs(0)) : nullptr;
      if (!a || !y || a->type().shape_size() == 0) return err("op '" + op.name() + "' (" + type + ") lacks A or Y");
      int64_t k = a->type().shape(a->type().shape_size() - 1);
      bool transA = false;
      if (type == "Gemm") {
        auto attrs = fromProto(op.attributes());
        if (!attrs) return attrs.takeError();
        transA = attrs->getInt("transA", 0) != 0;
        if (transA) k = a->type().shape(0);
      }
      w.gemmFlops = 2.0 * double(numel(y->type())) * double(k);
      const Program::Value *b = op.inputs_size() > 1 ? valueAt(p, op.inputs(1)) : nullptr;
      std::string aKey =
          std::to_string(root[size_t(op.inputs(0))]) + ":" + a->type().SerializeAsString() + (transA ? ":t" : "");
      if (bf16Operands && b) {
        std::array<int64_t, 2> elems{aKey == lastPackedA ? 0 : packedElems(op.inputs(0), a),
                                     packedElems(op.inputs(1), b)};
        // Copies are found before they are made (a product reading one
        // operand twice packs it once), as the runtime does.
        if (size_t(at) < cacheUse.operand.size()) {
          const std::array<int32_t, 2> &operand = cacheUse.operand[size_t(at)];
          for (size_t i = 0; i < 2; ++i)
            if (elems[i] > 0 && cached.count(operand[i])) elems[i] = 0;
          for (size_t i = 0; i < 2; ++i) {
            if (!cacheUse.stores[size_t(at)][i] || elems[i] == 0) continue;
            const int64_t bytes = cacheUse.operandBytes[size_t(operand[i])];
            if (bytes > copied.packCacheBytes - cacheTop) continue;
            cached.insert(operand[i]);
            cacheTop += bytes;
          }
        }
        w.memoryBytes = 6.0 * double(elems[0] + elems[1]);
      }
      // A Gemm's C (fuse-add-into-gemm's addend): the epilogue reads it.
      if (type == "Gemm" && op.inputs_size() > 2)
        if (const Program::Value *c = valueAt(p, op.inputs(2))) w.memoryBytes += double(tensorBytes(c->type()));
      lastPackedA = std::move(aKey);
    } else if (type == "megac.LinearCrossEntropy" || type == "megac.LinearCrossEntropyGrad") {
      const int wAt = type == "megac.LinearCrossEntropyGrad" ? 2 : 1;
      const bool wCopied = op.inputs_size() > wAt && op.inputs(wAt) >= 0 && isCopy[size_t(root[size_t(op.inputs(wAt))])];
      if (auto e = linearCrossEntropyWork(p, op, bf16Operands, wCopied, w)) return e;
      lastPackedA.clear();
    } else if (type == "Attention" || type == "megac.AttentionGrad") {
      if (auto e = attentionWork(p, op, bf16Operands, w)) return e;
      lastPackedA.clear();
    } else if (!viewSharesBytes(p, op)) {
      w.memoryBytes = memoryBytes(p, op);
      lastPackedA.clear();
    }
    each(op, w);
  }
  return llvm::Error::success();
}

llvm::Expected<ProgramWork> programWork(const Program &p, bool bf16Operands, CopiedArguments copied) {
  ProgramWork sum;
  auto add = [&](const Program::Op &, const ProgramWork &w) {
    sum.gemmFlops += w.gemmFlops;
    sum.attentionFlops += w.attentionFlops;
    sum.attentionElements += w.attentionElements;
    sum.memoryBytes += w.memoryBytes;
  };
  if (auto e = forEachOpWork(p, bf16Operands, copied, add)) return std::move(e);
  return sum;
}

// --- rates ---

double gpuCopyShare(const MachineProfile &m, int gpus) {
  if (gpus <= 1) return 1;
  if (m.pcieAllGpusBothGBps <= 0 || m.gpus < gpus) return 0;
  return std::min(1.0, m.pcieAllGpusBothGBps / double(gpus) / m.pcieBothGBps);
}

llvm::Expected<CostRates> costRates(const MachineProfile &m, const std::string &computeMode, int gpusAtOnce) {
  CostRates r;
  const double share = gpuCopyShare(m, gpusAtOnce);
  if (!(share > 0))
    return err("the machine profile did not measure copies to and from " + llvm::Twine(gpusAtOnce) +
               " GPUs at once (megac_profile on a machine with them: gpus, pcie_all_gpus_both_gbps)");
  r.h2dBytesPerS = m.pcieH2dGBps * 1e9 * share;
  r.d2hBytesPerS = m.pcieD2hGBps * 1e9 * share;
  r.bothBytesPerS = m.pcieBothGBps * 1e9 * share;
  r.hbmBytesPerS = m.gpuHbmGBps * 1e9;
  r.adamwParamsPerS = m.cpuAdamwParamsPerS;
  if (computeMode == "bf16") {
    r.gemmFlopsPerS = m.gemmBf16Tflops * 1e12, r.attentionFlopsPerS = m.attentionBf16Tflops * 1e12;
    r.attentionSecondsPerElement = m.attentionBf16PsPerElem * 1e-12 / 3.0; // a pass is a forward and a gradient
  }
  else if (computeMode == "tf32") r.gemmFlopsPerS = m.gemmTf32Tflops * 1e12;
  else if (computeMode == "fp32" || computeMode.empty()) r.gemmFlopsPerS = m.gemmFp32Tflops * 1e12;
  else return err("the plan's compute mode '" + computeMode + "' is not one of bf16, tf32, fp32");
  if (r.attentionFlopsPerS == 0) r.attentionFlopsPerS = r.gemmFlopsPerS;
  if (m.cpuAdamwUnderDmaParamsPerS > 0) r.adamwUnderDmaFactor = std::min(1.0, m.cpuAdamwUnderDmaParamsPerS / m.cpuAdamwParamsPerS);
  if (m.pcieBothUnderAdamwGBps > 0) r.dmaUnderAdamwFactor = std::min(1.0, m.pcieBothUnderAdamwGBps / m.pcieBothGBps);
  for (double x : {r.attentionFlopsPerS, r.h2dBytesPerS, r.d2hBytesPerS, r.bothBytesPerS, r.hbmBytesPerS, r.adamwParamsPerS, r.gemmFlopsPerS})
    if (!(x > 0) || !std::isfinite(x)) return err("the machine profile has a rate that is not positive");
  return r;
}

// --- the work of each action ---

namespace {

struct Work {
  int lane = 0;
  bool transfer = false; // measured in bytes over PCIe, else in seconds
  double amount = 0;     // bytes or seconds
};

class ScheduleSim {
public:
  ScheduleSim(const Plan &p, const CostRates &r) : p_(p), s_(p.schedule()), r_(r) {}
  llvm::Expected<StepPrediction> run();
  // The same accounting over measured action times instead of simulated ones.
  llvm::Expected<StepPrediction> measured(const std::vector<std::pair<double, double>> &times);

private:
  // Overlapping steps are simulated as this many steps in a row; the last is the one predicted.
  static constexpr int kOverlapSteps = 4;
  bool overlapped() const;
  void dependencies(int steps = 1);
  void finish(StepPrediction &out);
  llvm::Error check();
  llvm::Error actionWork(StepPrediction &out);
  void simulate(StepPrediction &out);
  void runLanes(std::vector<ActionTiming> &t);
  void criticalPath(StepPrediction &out);
  void memory(StepPrediction &out);

  const Plan &p_;
  const StreamSchedule &s_;
  CostRates r_;
  std::vector<Work> work_;
  std::vector<std::vector<int>> deps_; // per action: the actions whose completion it waits for
  // What the critical path walks: the actions' times and deps_ over the
  // steps simulated (one, or kOverlapSteps), the window of the predicted step
  // and the action it ends with.
  std::vector<ActionTiming> path_;
  double windowStart_ = 0;
  int pathEnd_ = -1;
};

} // namespace

llvm::Error ScheduleSim::check() {
  for (int i = 0; i < s_.actions_size(); ++i) {
    const StreamAction &a = s_.actions(i);
    auto bad = [&](const llvm::Twine &what) { return err("schedule action " + llvm::Twine(i) + " " + what); };
    if (a.unit() < 0 || a.unit() >= p_.units_size()) return bad("refers to unit " + llvm::Twine(a.unit()) + ", which does not exist");
    if (a.stream() < 0 || a.stream() >= kNumLanes) return bad("has an unknown stream");
    for (int32_t e : a.waits())
      if (e < 0 || e >= s_.events_size()) return bad("waits for event " + llvm::Twine(e) + ", which does not exist");
    for (int32_t e : a.records())
      if (e < 0 || e >= s_.events_size()) return bad("records event " + llvm::Twine(e) + ", which does not exist");
  }
  for (const Unit &u : p_.units()) {
    if (u.template_id() < 0 || u.template_id() >= p_.templates_size()) return err("unit '" + u.name() + "' has no template");
    for (int32_t q : u.parameters())
      if (q < 0 || q >= p_.parameters_size()) return err("unit '" + u.name() + "' refers to a missing parameter");
  }
  return llvm::Error::success();
}

llvm::Error ScheduleSim::actionWork(StepPrediction &out) {
  // A parameter is updated once, with the last unit that contributes to its
  // gradient: backward runs in reverse, so the lowest-numbered unit using it.
  std::vector<int32_t> updatedBy(size_t(p_.parameters_size()), std::numeric_limits<int32_t>::max());
  for (int u = 0; u < p_.units_size(); ++u)
    for (int32_t q : p_.units(u).parameters()) updatedBy[size_t(q)] = std::min(updatedBy[size_t(q)], int32_t(u));
  // Transfers move a unit's slot layout (fp32, each parameter 256-aligned)
  // as one copy; gradients use the same layout.
  // A PREFETCH moves 2 bytes, not 4, of each weight that streams as bf16,
  // and the host's AdamW writes those 2 bytes beside the 28 it moves per
  // parameter, with plain stores (the cache reads each line first): 4 more
  // bytes, counted as that much more of its update (the 8B on an H100: its
  // CPU lane 1.653 -> 1.891 s, 14%, as 32/28).
  // A token-indexed table whose unread rows step early (UPDATE_UNREAD_ROWS,
  // runtime/plan/TokenRows.h): its UPDATE steps the rows the step's tokens
  // are expected to read (readRowsShare), the early action the rest.
  const std::vector<bool> early = unitsSteppingUnreadRowsEarly(p_);
  std::vector<int64_t> unitWeightBytes, unitPrefetchBytes, unitUpdateParams, unitUnreadParams;
  std::vector<double> unitHostUpdateWork, unitUnreadWork; // parameters, those with a bf16 copy as 32/28 of one
  for (int u = 0; u < p_.units_size(); ++u) {
    int64_t updates = 0, unread = 0;
    double work = 0, unreadWork = 0;
    std::vector<int32_t> tables = early[size_t(u)] ? unreadRowsParameters(p_, u) : std::vector<int32_t>();
    for (int32_t q : p_.units(u).parameters())
      if (updatedBy[size_t(q)] == u) {
        const double n = double(p_.parameters(q).numel()) * (p_.parameters(q).streams_bf16() ? 32.0 / 28.0 : 1.0);
        const double share = std::count(tables.begin(), tables.end(), q) ? readRowsShare(p_, q) : 1.0;
        updates += int64_t(double(p_.parameters(q).numel()) * share);
        unread += p_.parameters(q).numel() - int64_t(double(p_.parameters(q).numel()) * share);
        work += n * share;
        unreadWork += n * (1.0 - share);
      }
    unitWeightBytes.push_back(unitWeightLayout(p_, u).bytes);
    unitPrefetchBytes.push_back(prefetchBytes(p_, u));
    unitUpdateParams.push_back(updates);
    unitUnreadParams.push_back(unread);
    unitHostUpdateWork.push_back(work);
    unitUnreadWork.push_back(unreadWork);
  }
  // (template, backward + 2 x keeps activations + 4 x reads its weights' bf16 copies)
  std::map<std::pair<int, int>, ProgramWork> programs;
  for (const StreamAction &a : s_.actions()) {
    ActionTiming t;
    Work w;
    t.lane = w.lane = a.stream();
    int32_t unit = a.unit();
    switch (a.kind()) {
    case StreamAction::PREFETCH:
    case StreamAction::OFFLOAD:
    case StreamAction::FETCH_MOMENTS:
    case StreamAction::WRITEBACK:
      w.transfer = true;
      t.transferBytes = a.kind() == StreamAction::PREFETCH ? unitPrefetchBytes[size_t(unit)]
                                                           : unitWeightBytes[size_t(unit)] * transferCopies(a.kind());
      w.amount = double(t.transferBytes);
      (a.stream() == StreamAction::H2D ? out.h2dBytes : out.d2hBytes) += t.transferBytes;
      if (a.kind() == StreamAction::PREFETCH && s_.weight_copy_bytes() > 0) {
        // Then the weights' bf16 copy, on the same stream: 4 bytes read and 2
        // written per parameter, counted as the H2D time it takes.
        t.memoryBytes = 1.5 * double(unitWeightBytes[size_t(unit)]);
        w.amount += t.memoryBytes / r_.hbmBytesPerS * r_.h2dBytesPerS;
      }
      break;
    case StreamAction::SAVE_CHECKPOINT:
    case StreamAction::LOAD_CHECKPOINT:
      w.transfer = true;
      t.transferBytes = checkpointCopyBytes(p_, a);
      w.amount = double(t.transferBytes);
      (a.stream() == StreamAction::H2D ? out.h2dBytes : out.d2hBytes) += t.transferBytes;
      break;
    case StreamAction::FORWARD:
    case StreamAction::BACKWARD: {
      bool backward = a.kind() == StreamAction::BACKWARD;
      int tid = p_.units(unit).template_id();
      const bool keep = keepsActivations(p_, unit);
      const CopiedArguments copied = copiedWeightArguments(p_, unit);
      const int variant = int(backward) + 2 * int(keep) + 4 * int(copied.end > copied.begin);
      auto it = programs.find({tid, variant});
      if (it == programs.end()) {
        const Template &tpl = p_.templates(tid);
        const Program &prog = backward ? backwardProgram(p_, unit) : forwardProgram(p_, unit);
        auto pw = programWork(prog, p_.compute() == "bf16", copied);
        if (!pw) return err("template '" + tpl.name() + "': " + llvm::toString(pw.takeError()));
        // forward_keep copies its saved values out of the arena (read + write).
        if (keep && !backward) pw->memoryBytes += 2.0 * double(savedLayout(tpl).bytes);
        it = programs.emplace(std::make_pair(tid, variant), *pw).first;
      }
      t.gemmFlops = it->second.gemmFlops;
      t.attentionFlops = it->second.attentionFlops;
      t.memoryBytes = it->second.memoryBytes;
      w.amount = programSeconds(it->second, r_);
      // The gradients' NaN/Inf check after the BACKWARD (runtime/cuda/FiniteCheckKernels.h)
      // reads the unit's gradients once more, on the compute stream.
      if (backward && !p_.optimizer().no_finite_check()) {
        const double checkBytes = double(unitWeightBytes[size_t(unit)]);
        t.memoryBytes += checkBytes;
        w.amount += checkBytes / r_.hbmBytesPerS;
      }
      break;
    }
    case StreamAction::UPDATE:
      t.parameters = unitUpdateParams[size_t(unit)];
      // AdamW on the GPU (a resident or adamw_on_gpu unit's) reads the
      // gradient, weight and moments and writes the last three: 28 bytes per parameter.
      if (a.stream() == StreamAction::COMPUTE) {
        t.memoryBytes = 28.0 * double(t.parameters);
        w.amount = t.memoryBytes / r_.hbmBytesPerS;
      } else {
        w.amount = unitHostUpdateWork[size_t(unit)] / r_.adamwParamsPerS;
      }
      break;
    case StreamAction::UPDATE_UNREAD_ROWS:
      t.parameters = unitUnreadParams[size_t(unit)];
      w.amount = unitUnreadWork[size_t(unit)] / r_.adamwParamsPerS;
      break;
    default: return err("schedule action of unknown kind " + llvm::Twine(int(a.kind())));
    }
    t.alone = w.transfer ? w.amount / (w.lane == kLaneD2H ? r_.d2hBytesPerS : r_.h2dBytesPerS) : w.amount;
    out.actions.push_back(t);
    work_.push_back(w);
  }
  return llvm::Error::success();
}

// Runs the lanes: each takes its actions in issue order; an action starts
// when its lane is free, the actions it waits for have ended and the host
// has issued it. Transfers
// progress at their lane's rate, or at the shared rate while both PCIe lanes
// are busy; while the CPU AdamW runs beside copies, both slow by the factors
// the profile measured.
// The latest record of each event before each action, in issue order.
// A GPU stream cannot wait for CPU work: the host thread blocks until such
// an event is recorded before it issues the action, so every later action
// is issued after it too (the CPU lane runs in order, so the latest such
// CPU action so far is the one that ends last).
// Over `steps` steps in a row (action j is action j % n of step j / n): a
// step is issued once the previous one's GPU lanes are done, and, unless
// steps overlap, its CPU lane too; a wait on an event the step has not
// recorded yet waits for the previous step's record.
void ScheduleSim::dependencies(int steps) {
  const int n = s_.actions_size();
  std::vector<int> lastRecord(size_t(s_.events_size()), -1);
  deps_.assign(size_t(n) * size_t(steps), {});
  int hostBlockedUntil = -1;
  std::vector<int> barrier;
  for (int j = 0; j < n * steps; ++j) {
    const int i = j % n;
    if (i == 0 && j > 0) { // the previous step's last action on each lane it must see end
      barrier.clear();
      for (int lane = 0; lane < kNumLanes; ++lane) {
        if (lane == kLaneCPU && overlapped()) continue;
        for (int k = j - 1; k >= j - n; --k)
          if (work_[size_t(k)].lane == lane) {
            barrier.push_back(k);
            break;
          }
      }
    }
    std::vector<int> &d = deps_[size_t(j)];
    d = barrier;
    for (int32_t e : s_.actions(i).waits()) {
      int recorder = lastRecord[size_t(e)];
      if (recorder < 0) continue;
      d.push_back(recorder);
      if (work_[size_t(j)].lane != kLaneCPU && work_[size_t(recorder)].lane == kLaneCPU)
        hostBlockedUntil = std::max(hostBlockedUntil, recorder);
    }
    if (hostBlockedUntil >= 0) d.push_back(hostBlockedUntil);
    for (int32_t e : s_.actions(i).records()) lastRecord[size_t(e)] = j;
  }
}

bool ScheduleSim::overlapped() const {
  if (!s_.overlap_steps()) return false;
  for (const StreamAction &a : s_.actions())
    if (a.stream() == StreamAction::CPU) return true;
  return false;
}

// Overlapping steps: kOverlapSteps in a row, and the last one's times from
// its issue; the step ends with its GPU lanes (the host's AdamW of its units
// may end later, beside the next step).
void ScheduleSim::simulate(StepPrediction &out) {
  const int n = s_.actions_size();
  const int steps = overlapped() ? kOverlapSteps : 1;
  const std::vector<Work> one = work_;
  for (int r = 1; r < steps; ++r) work_.insert(work_.end(), one.begin(), one.end());
  dependencies(steps);
  path_.assign(size_t(n) * size_t(steps), {});
  for (size_t j = 0; j < path_.size(); ++j) path_[j].lane = work_[j].lane;
  runLanes(path_);
  work_.resize(size_t(n));
  const int first = (steps - 1) * n;
  // The step is issued once the previous one's GPU lanes are done.
  windowStart_ = 0;
  for (int j = first - n; j >= 0 && j < first; ++j)
    if (path_[size_t(j)].lane != kLaneCPU) windowStart_ = std::max(windowStart_, path_[size_t(j)].end);
  double end = windowStart_;
  pathEnd_ = -1;
  for (int i = 0; i < n; ++i) {
    const ActionTiming &t = path_[size_t(first + i)];
    ActionTiming &o = out.actions[size_t(i)];
    o.start = t.start - windowStart_;
    o.end = t.end - windowStart_;
    out.laneBusy[o.lane] += o.end - o.start;
    if (steps > 1 && o.lane == kLaneCPU) continue;
    if (pathEnd_ < 0 || t.end > end) {
      end = t.end;
      pathEnd_ = first + i;
    }
  }
  out.stepSeconds = end - windowStart_;
}

// The lanes' run over work_ and deps_ (one step or several in a row): each
// action's start and end in t.
void ScheduleSim::runLanes(std::vector<ActionTiming> &t) {
  const int n = int(work_.size());
  std::vector<std::vector<int>> queue(kNumLanes);
  for (int i = 0; i < n; ++i) queue[size_t(work_[size_t(i)].lane)].push_back(i);

  std::vector<bool> done(size_t(n), false);
  std::vector<size_t> next(kNumLanes, 0);
  std::vector<int> running(kNumLanes, -1);
  std::vector<double> remaining(size_t(n), 0);
  double now = 0;
  const double h2dShare = r_.bothBytesPerS * r_.h2dBytesPerS / (r_.h2dBytesPerS + r_.d2hBytesPerS);
  const double d2hShare = r_.bothBytesPerS * r_.d2hBytesPerS / (r_.h2dBytesPerS + r_.d2hBytesPerS);
  for (;;) {
    // Start what can start now (repeat: zero-length actions end at once).
    bool started = true;
    while (started) {
      started = false;
      for (int lane = 0; lane < kNumLanes; ++lane) {
        if (running[size_t(lane)] >= 0 || next[size_t(lane)] == queue[size_t(lane)].size()) continue;
        int a = queue[size_t(lane)][next[size_t(lane)]];
        bool ready = std::all_of(deps_[size_t(a)].begin(), deps_[size_t(a)].end(), [&](int d) { return bool(done[size_t(d)]); });
        if (!ready) continue;
        ++next[size_t(lane)];
        t[size_t(a)].start = now;
        remaining[size_t(a)] = work_[size_t(a)].amount;
        if (remaining[size_t(a)] <= 0) {
          t[size_t(a)].end = now;
          done[size_t(a)] = true;
        } else {
          running[size_t(lane)] = a;
        }
        started = true;
      }
    }
    // The rate of each running action, then the time to the first end.
    double rate[kNumLanes] = {};
    bool bothPcie = running[kLaneH2D] >= 0 && running[kLaneD2H] >= 0 && work_[size_t(running[kLaneH2D])].transfer &&
                    work_[size_t(running[kLaneD2H])].transfer;
    // The CPU AdamW and the copies share host memory (as measured, both ways at once).
    bool anyCopy = (running[kLaneH2D] >= 0 && work_[size_t(running[kLaneH2D])].transfer) ||
                   (running[kLaneD2H] >= 0 && work_[size_t(running[kLaneD2H])].transfer);
    bool adamw = running[kLaneCPU] >= 0 && anyCopy;
    double dt = std::numeric_limits<double>::infinity();
    for (int lane = 0; lane < kNumLanes; ++lane) {
      int a = running[size_t(lane)];
      if (a < 0) continue;
      const Work &w = work_[size_t(a)];
      if (!w.transfer) rate[lane] = lane == kLaneCPU && adamw ? r_.adamwUnderDmaFactor : 1;
      else if (lane == kLaneD2H) rate[lane] = bothPcie ? std::min(r_.d2hBytesPerS, d2hShare) : r_.d2hBytesPerS;
      else rate[lane] = bothPcie ? std::min(r_.h2dBytesPerS, h2dShare) : r_.h2dBytesPerS;
      if (w.transfer && running[kLaneCPU] >= 0) rate[lane] *= r_.dmaUnderAdamwFactor;
      dt = std::min(dt, remaining[size_t(a)] / rate[lane]);
    }
    if (!std::isfinite(dt)) break; // nothing runs: every action has ended
    now += dt;
    for (int lane = 0; lane < kNumLanes; ++lane) {
      int a = running[size_t(lane)];
      if (a < 0) continue;
      double left = remaining[size_t(a)] / rate[lane] - dt;
      if (left <= 1e-12 * std::max(1.0, now)) {
        t[size_t(a)].end = now;
        done[size_t(a)] = true;
        running[size_t(lane)] = -1;
      } else {
        remaining[size_t(a)] = left * rate[lane];
      }
    }
  }
}

// Walks back from the action the step ends with (path_, pathEnd_), each
// time to whichever of its lane predecessor and the actions it waited for
// ended last (what held its start), counting the time inside the step's
// window (an earlier step's host AdamW that held it counts from the step's start).
void ScheduleSim::criticalPath(StepPrediction &out) {
  const int n = int(path_.size());
  if (n == 0 || pathEnd_ < 0) return;
  std::vector<int> lanePrev(size_t(n), -1);
  int lastOnLane[kNumLanes] = {-1, -1, -1, -1};
  for (int i = 0; i < n; ++i) {
    lanePrev[size_t(i)] = lastOnLane[path_[size_t(i)].lane];
    lastOnLane[path_[size_t(i)].lane] = i;
  }
  int a = pathEnd_;
  while (a >= 0 && path_[size_t(a)].end > windowStart_) {
    const ActionTiming &t = path_[size_t(a)];
    out.criticalPath[t.lane] += t.end - std::max(t.start, windowStart_);
    int held = -1;
    double heldEnd = -1;
    std::vector<int> preds = deps_[size_t(a)];
    if (lanePrev[size_t(a)] >= 0) preds.push_back(lanePrev[size_t(a)]);
    for (int d : preds)
      if (path_[size_t(d)].end > heldEnd) {
        heldEnd = path_[size_t(d)].end;
        held = d;
      }
    a = heldEnd > 0 ? held : -1; // a start at time 0 waited for nothing
  }
  out.bottleneck = kLaneCompute;
  for (int lane = 0; lane < kNumLanes; ++lane)
    if (out.criticalPath[lane] > out.criticalPath[out.bottleneck]) out.bottleneck = lane;
}

// Device memory over time: a region is live from the start of its first
// action to the end of its last; regions sharing bytes count once.
void ScheduleSim::memory(StepPrediction &out) {
  const int n = int(out.actions.size());
  struct Live {
    double from, to;
    int64_t begin, end;
  };
  std::vector<Live> regions;
  for (const DeviceRegion &r : s_.regions()) {
    double from = r.first_action() >= 0 && r.first_action() < n ? out.actions[size_t(r.first_action())].start : 0;
    double to = r.last_action() >= 0 && r.last_action() < n ? out.actions[size_t(r.last_action())].end : out.stepSeconds;
    if (r.first_action() < 0 && r.last_action() < 0) to = out.stepSeconds;
    to = std::min(to, out.stepSeconds); // a host AdamW running on past the step (overlapping steps) holds no device memory
    from = std::min(from, out.stepSeconds);
    regions.push_back({from, std::max(from, to), r.offset(), r.offset() + r.bytes()});
  }
  std::vector<double> times{0, out.stepSeconds};
  for (const ActionTiming &t : out.actions) {
    times.push_back(std::min(t.start, out.stepSeconds));
    times.push_back(std::min(t.end, out.stepSeconds));
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  for (double time : times) {
    // Live over [from, to); a region whose lifetime is a single instant (a
    // zero-length action) counts at that instant.
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const Live &l : regions)
      if ((l.from <= time && time < l.to) || (l.from == l.to && l.from == time)) ranges.push_back({l.begin, l.end});
    std::sort(ranges.begin(), ranges.end());
    int64_t bytes = 0, covered = std::numeric_limits<int64_t>::min();
    for (auto [b, e] : ranges) {
      b = std::max(b, covered);
      if (e > b) {
        bytes += e - b;
        covered = e;
      }
    }
    if (!out.memory.empty() && out.memory.back().bytes == bytes) continue;
    out.memory.push_back({time, bytes});
    out.peakMemoryBytes = std::max(out.peakMemoryBytes, bytes);
  }
  if (out.memory.empty() || out.memory.back().time < out.stepSeconds) out.memory.push_back({out.stepSeconds, 0});
}

llvm::Expected<StepPrediction> ScheduleSim::run() {
  if (auto e = check()) return std::move(e);
  StepPrediction out;
  out.rates = r_;
  if (auto e = actionWork(out)) return std::move(e);
  simulate(out);
  finish(out);
  return out;
}

// What follows from the actions' times: critical path, memory, TFLOPS.
void ScheduleSim::finish(StepPrediction &out) {
  criticalPath(out);
  memory(out);
  int64_t params = p_.total_parameters();
  if (params <= 0)
    for (const Parameter &q : p_.parameters()) params += q.numel();
  // Every micro-batch the pass carries (layer-major accumulation).
  const double perPass = p_.has_schedule() ? double(passMicroBatches(p_.schedule())) : 1.0;
  out.modelFlops = 6.0 * double(params) * double(p_.batch()) * double(p_.seq()) * perPass;
  out.tflops = out.stepSeconds > 0 ? out.modelFlops / out.stepSeconds / 1e12 : 0;
}

llvm::Expected<StepPrediction> ScheduleSim::measured(const std::vector<std::pair<double, double>> &times) {
  if (auto e = check()) return std::move(e);
  if (times.size() != size_t(s_.actions_size()))
    return err("measured times for " + llvm::Twine(times.size()) + " actions; the schedule has " +
               llvm::Twine(s_.actions_size()));
  StepPrediction out;
  out.rates = r_;
  if (auto e = actionWork(out)) return std::move(e);
  dependencies();
  // Overlapping steps: the step ends with its GPU lanes (its host AdamW may run on).
  const bool overlap = overlapped();
  pathEnd_ = -1;
  for (size_t i = 0; i < times.size(); ++i) {
    ActionTiming &t = out.actions[i];
    t.start = std::max(0.0, times[i].first);
    t.end = std::max(t.start, times[i].second);
    out.laneBusy[t.lane] += t.end - t.start;
    if (overlap && t.lane == kLaneCPU) continue;
    if (t.end > out.stepSeconds || pathEnd_ < 0) pathEnd_ = int(i);
    out.stepSeconds = std::max(out.stepSeconds, t.end);
  }
  path_ = out.actions;
  windowStart_ = 0;
  finish(out);
  return out;
}

llvm::Expected<StepPrediction> measuredStep(const Plan &p, const MachineProfile &m,
                                            const std::vector<std::pair<double, double>> &times) {
  if (!p.has_schedule()) return err("the plan has no streaming schedule (compiled for the CPU only)");
  auto rates = costRates(m, p.compute());
  if (!rates) return rates.takeError();
  return ScheduleSim(p, *rates).measured(times);
}

llvm::Expected<StepPrediction> predictStep(const Plan &p, const MachineProfile &m, int gpusAtOnce) {
  if (!p.has_schedule()) return err("the plan has no streaming schedule (compiled for the CPU only)");
  auto rates = costRates(m, p.compute(), gpusAtOnce);
  if (!rates) return rates.takeError();
  return ScheduleSim(p, *rates).run();
}

llvm::Expected<std::vector<OpTypeTime>> predictOpTimes(const Plan &p, const MachineProfile &m) {
  if (!p.has_schedule()) return err("the plan has no streaming schedule (compiled for the CPU only)");
  auto rates = costRates(m, p.compute());
  if (!rates) return rates.takeError();
  std::map<std::string, OpTypeTime> byLabel;
  for (const StreamAction &a : p.schedule().actions()) {
    if (a.kind() != StreamAction::FORWARD && a.kind() != StreamAction::BACKWARD) continue;
    if (a.unit() < 0 || a.unit() >= p.units_size()) return err("a schedule action refers to a unit that does not exist");
    const bool backward = a.kind() == StreamAction::BACKWARD;
    const Program &prog = backward ? backwardProgram(p, a.unit()) : forwardProgram(p, a.unit());
    auto add = [&](const Program::Op &op, const ProgramWork &w) {
      std::string label = op.type() + (backward ? " (backward)" : "");
      OpTypeTime &t = byLabel[label];
      t.label = label;
      ++t.launches;
      t.seconds += programSeconds(w, *rates);
    };
    if (auto e = forEachOpWork(prog, p.compute() == "bf16", copiedWeightArguments(p, a.unit()), add))
      return err("unit '" + p.units(a.unit()).name() + "': " + llvm::toString(std::move(e)));
    if (backward && !p.optimizer().no_finite_check()) { // the gradients' check, after the program
      OpTypeTime &t = byLabel["NaN/Inf check (backward)"];
      t.label = "NaN/Inf check (backward)";
      t.launches += p.units(a.unit()).parameters_size();
      t.seconds += double(unitWeightLayout(p, a.unit()).bytes) / rates->hbmBytesPerS;
    }
  }
  std::vector<OpTypeTime> out;
  for (auto &[label, t] : byLabel) out.push_back(std::move(t));
  std::stable_sort(out.begin(), out.end(), [](const OpTypeTime &x, const OpTypeTime &y) { return x.seconds > y.seconds; });
  return out;
}

} // namespace megac::plan
