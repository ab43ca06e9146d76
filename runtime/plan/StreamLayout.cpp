#include "runtime/plan/StreamLayout.h"

#include "runtime/cpu/NormAttentionShapes.h"
#include "runtime/plan/ArenaRules.h"
#include "runtime/plan/FusedAttention.h"
#include "runtime/plan/UnitPrograms.h"

#include <algorithm>

namespace megac::plan {

WeightLayout unitWeightLayout(const Plan &p, int unitIndex) {
  WeightLayout l;
  for (int32_t id : p.units(unitIndex).parameters()) {
    l.bytes = alignUp(l.bytes);
    l.offsets.push_back(l.bytes);
    l.bytes += 4 * p.parameters(id).numel();
  }
  l.bytes = alignUp(l.bytes);
  return l;
}

int64_t largestUnitWeightBytes(const Plan &p, bool streamedOnly) {
  int64_t most = 0;
  for (int u = 0; u < p.units_size(); ++u)
    if (!streamedOnly || !p.units(u).resident()) most = std::max(most, unitWeightLayout(p, u).bytes);
  return most;
}

bool canBeResident(const Plan &p, int unitIndex) {
  const Unit &u = p.units(unitIndex);
  for (int32_t q : u.parameters())
    if (p.parameters(q).units_size() > 1) return false;
  return u.parameters_size() > 0;
}

static std::vector<int64_t> placeConstants(const Program &prog, int64_t &bytes) {
  std::vector<int64_t> at(size_t(prog.values_size()), -1);
  for (int v = 0; v < prog.values_size(); ++v) {
    if (prog.values(v).kind() != Program::Value::CONSTANT) continue;
    at[size_t(v)] = bytes;
    bytes += alignUp(std::max<int64_t>(typeBytes(prog.values(v).type()), 0));
  }
  return at;
}

ConstantsLayout constantsLayout(const Plan &p) {
  ConstantsLayout l;
  for (const Template &t : p.templates()) {
    l.forward.push_back(placeConstants(t.forward(), l.bytes));
    l.backward.push_back(placeConstants(t.backward(), l.bytes));
    const bool keep = hasKeepPrograms(t);
    l.forwardKeep.push_back(keep ? placeConstants(t.forward_keep(), l.bytes) : std::vector<int64_t>{});
    l.backwardKept.push_back(keep ? placeConstants(t.backward_kept(), l.bytes) : std::vector<int64_t>{});
  }
  return l;
}

static int64_t scoreBudget = int64_t(4) << 30;

int64_t attentionScoreBudgetBytes() { return scoreBudget; }

ScopedAttentionScoreBudget::ScopedAttentionScoreBudget(int64_t bytes) : saved_(scoreBudget) { scoreBudget = bytes; }
ScopedAttentionScoreBudget::~ScopedAttentionScoreBudget() { scoreBudget = saved_; }

int64_t attentionChunkRows(int64_t units, int64_t rows, int64_t keys, int64_t matrices) {
  const int64_t perRow = 4 * std::max<int64_t>(units, 1) * std::max<int64_t>(keys, 1) * std::max<int64_t>(matrices, 1);
  int64_t fit = attentionScoreBudgetBytes() / perRow;
  if (fit >= rows) return std::max<int64_t>(rows, 1);
  if (fit >= 64) fit = fit / 64 * 64;
  return std::max<int64_t>(fit, 1);
}

int64_t materializedAttentionBytes(const cpu::AttentionDims &d, bool grad, bool bf16) {
  const int64_t B = d.batch, H = d.qHeads, KVH = d.kvHeads, S = d.qSeq, T = d.totalSeq, D = d.headSize,
                Dv = d.vHeadSize;
  const int64_t units = B * KVH, rows = KVH > 0 ? (H / KVH) * S : 0;
  const int64_t rc = attentionChunkRows(units, rows, T, grad ? 2 + (d.softcap > 0) : 1);
  int64_t bytes = 0;
  auto floats = [&](int64_t n) { bytes += alignUp(4 * std::max<int64_t>(n, 0), 256); };
  const int64_t chunk = units * rc * T;
  if (!grad) {
    floats(chunk);
    if (d.is3D) floats(B * H * S * D);
    if (d.is3D || d.pastSeq > 0) floats(B * KVH * T * D), floats(B * KVH * T * Dv);
    if (d.is3D) floats(B * H * S * Dv);
  } else {
    floats(chunk), floats(chunk);
    if (d.softcap > 0) floats(chunk);
    if (d.is3D) {
      floats(B * H * S * D), floats(B * KVH * T * D), floats(B * KVH * T * Dv), floats(B * H * S * Dv);
      floats(B * H * S * D), floats(B * KVH * T * D), floats(B * KVH * T * Dv);
    }
  }
  if (bf16) bytes += alignUp(attentionPackBytes(B, KVH, KVH, rc, T, D, Dv, grad), 256);
  return bytes;
}

llvm::Expected<cpu::AttentionDims> attentionOpDims(const Program &p, const Program::Op &op) {
  const bool grad = op.type() == "megac.AttentionGrad";
  const int q = grad ? 1 : 0;
  std::vector<Shape> shapes(size_t(op.inputs_size()));
  auto shape = [&](int i) -> const Shape * {
    if (i >= op.inputs_size() || op.inputs(i) < 0 || op.inputs(i) >= p.values_size()) return nullptr;
    const TensorType &t = p.values(op.inputs(i)).type();
    shapes[size_t(i)].assign(t.shape().begin(), t.shape().end());
    return &shapes[size_t(i)];
  };
  cpu::AttentionInputShapes in;
  in.q = shape(q);
  in.k = shape(q + 1);
  in.v = shape(q + 2);
  in.mask = shape(q + 3);
  if (grad) {
    in.nonpadKvSeqlen = shape(q + 4);
  } else {
    in.pastKey = shape(4);
    in.pastValue = shape(5);
    in.nonpadKvSeqlen = shape(6);
  }
  const std::string what = "op '" + op.name() + "' (" + op.type() + ")";
  if (!in.q || !in.k || !in.v)
    return llvm::createStringError(llvm::inconvertibleErrorCode(), what + " lacks Q, K or V");
  auto attrs = fromProto(op.attributes());
  if (!attrs) return attrs.takeError();
  auto d = cpu::attentionDims(*attrs, in);
  if (!d) return llvm::createStringError(llvm::inconvertibleErrorCode(), what + ": " + llvm::toString(d.takeError()));
  return d;
}

// Calls fn(dims, grad, plain) for each Attention and megac.AttentionGrad of
// p whose dims are known; `plain` as plan::runsFused takes it.
template <class F> static void forEachAttention(const Program &p, F fn) {
  for (const Program::Op &op : p.ops()) {
    if (op.type() != "Attention" && op.type() != "megac.AttentionGrad") continue;
    auto d = attentionOpDims(p, op);
    if (!d) {
      llvm::consumeError(d.takeError());
      continue;
    }
    fn(*d, op.type() == "megac.AttentionGrad", attentionOperandsPlain(p, op));
  }
}

bool attentionOperandsPlain(const Program &p, const Program::Op &op) {
  const bool grad = op.type() == "megac.AttentionGrad";
  const int q = grad ? 1 : 0;
  auto present = [&](int i) { return i < op.inputs_size() && op.inputs(i) >= 0 && op.inputs(i) < p.values_size(); };
  auto f32 = [&](int i) { return present(i) && p.values(op.inputs(i)).type().dtype() == F32; };
  bool plain = f32(q) && f32(q + 1) && f32(q + 2) && (!grad || f32(0));
  for (int i = q + 3; i < op.inputs_size(); ++i) plain &= op.inputs(i) < 0;
  for (int i = 1; !grad && i < op.outputs_size(); ++i) plain &= op.outputs(i) < 0;
  return plain;
}

int64_t attentionWorkspaceBytes(const Program &p, bool bf16) {
  int64_t most = 0;
  forEachAttention(p, [&](const cpu::AttentionDims &d, bool grad, bool plain) {
    most = std::max(most, bf16 && runsFused(d, plain) ? fusedAttentionScratchBytes(d.batch, d.qHeads, d.kvHeads,
                                                                                    d.qSeq, d.headSize,
                                                                                    d.vHeadSize, grad)
                                                      : materializedAttentionBytes(d, grad, bf16));
  });
  return most;
}

int64_t attentionStashBytes(const Plan &p) {
  if (p.compute() != "bf16") return 0;
  int64_t most = 0;
  for (const Template &t : p.templates())
    for (const Program *prog : templatePrograms(t))
      forEachAttention(*prog, [&](const cpu::AttentionDims &d, bool, bool plain) {
        if (runsFused(d, plain))
          most = std::max(most, fusedAttentionStashBytes(d.batch, d.qHeads, d.kvHeads, d.qSeq, d.headSize,
                                                         d.vHeadSize));
      });
  return most;
}

int64_t gemmPackBytes(const Program &p) {
  int64_t most = 0;
  auto elems = [&](int32_t id) -> int64_t {
    if (id < 0 || id >= p.values_size()) return 0;
    int64_t n = 1;
    for (int64_t d : p.values(id).type().shape()) n *= d;
    return n;
  };
  for (const Program::Op &op : p.ops())
    if ((op.type() == "MatMul" || op.type() == "Gemm") && op.inputs_size() >= 2)
      most = std::max(most, bf16PackBytes(elems(op.inputs(0)), elems(op.inputs(1))));
  return most;
}

int64_t linearCrossEntropyWorkspaceBytes(bool grad, int64_t rows, int64_t hidden, int64_t vocab, int64_t chunkRows,
                                         bool bf16) {
  const int64_t c = linearCrossEntropyChunkRows(rows, vocab, chunkRows);
  int64_t bytes = alignUp(4 * c * vocab);
  bytes += grad ? alignUp(8) : 2 * alignUp(4 * rows);
  if (bf16) {
    // W once; then the chunk's h (forward), or the chunk's dlogits (dh) and
    // h and dlogits together (dW) in the gradient.
    bytes += alignUp(bf16PackBytes(hidden * vocab, 0));
    bytes += grad ? bf16PackBytes(c * hidden, c * vocab) : bf16PackBytes(c * hidden, 0);
  }
  return bytes;
}

int64_t linearCrossEntropyBytes(const Program &p, bool bf16) {
  int64_t most = 0;
  auto shape = [&](int32_t id) -> std::vector<int64_t> {
    if (id < 0 || id >= p.values_size()) return {};
    return {p.values(id).type().shape().begin(), p.values(id).type().shape().end()};
  };
  for (const Program::Op &op : p.ops()) {
    const bool grad = op.type() == "megac.LinearCrossEntropyGrad";
    if (!grad && op.type() != "megac.LinearCrossEntropy") continue;
    const int first = grad ? 1 : 0;
    if (op.inputs_size() < first + 3) continue;
    std::vector<int64_t> h = shape(op.inputs(first)), w = shape(op.inputs(first + 1));
    if (h.empty() || w.size() != 2) continue;
    auto attrs = fromProto(op.attributes());
    if (!attrs) {
      llvm::consumeError(attrs.takeError());
      continue;
    }
    const int64_t hidden = h.back(), vocab = attrs->getInt("trans_w", 0) ? w[0] : w[1];
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < h.size(); ++i) rows *= h[i];
    most = std::max(most, linearCrossEntropyWorkspaceBytes(grad, rows, hidden, vocab, attrs->getInt("chunk_rows", 0),
                                                           bf16));
  }
  return most;
}

int64_t workspaceBudgetBytes(const Plan &p) {
  int64_t most = 0;
  for (const Template &t : p.templates()) {
    const bool bf16 = p.compute() == "bf16";
    for (const Program *prog : templatePrograms(t)) {
      most = std::max({most, attentionWorkspaceBytes(*prog, bf16), linearCrossEntropyBytes(*prog, bf16)});
      if (bf16) most = std::max(most, gemmPackBytes(*prog));
    }
  }
  return alignUp(most) + alignUp(attentionStashBytes(p)) + alignUp(p.schedule().pack_cache_bytes()) +
         kGemmWorkspaceBytes;
}

bool anyAdamwOnGpu(const Plan &p) {
  for (const Unit &u : p.units())
    if (adamwOnGpu(u)) return true;
  return false;
}

int64_t momentSlotBytes(const Plan &p) {
  int64_t most = 0;
  for (int u = 0; u < p.units_size(); ++u)
    if (adamwOnGpu(p.units(u))) most = std::max(most, momentLayout(p, u).bytes);
  return most;
}

std::string slotEventName(char slotKind, int slot, bool ready) {
  return std::string(1, slotKind) + std::to_string(slot) + (ready ? ".ready" : ".free");
}

std::string unitUpdatedEventName(int unit) { return "u" + std::to_string(unit) + ".updated"; }

llvm::Error checkPassMicroBatches(const StreamSchedule &s) {
  const int m = passMicroBatches(s);
  if (m > 4096)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the plan's schedule carries " + std::to_string(m) + " micro-batches a pass (at most 4096)");
  for (const StreamAction &a : s.actions())
    if (a.micro_batch() < 0 || a.micro_batch() >= m)
      return llvm::createStringError(llvm::inconvertibleErrorCode(), "the plan's schedule has an action of micro-batch " +
                                                                         std::to_string(a.micro_batch()) + " of " + std::to_string(m));
  return llvm::Error::success();
}

bool stepKeepsGradients(const Plan &p) {
  const int64_t accum = std::max<int64_t>(p.optimizer().grad_accum(), 1);
  const int perPass = p.has_schedule() ? passMicroBatches(p.schedule()) : 1;
  return p.optimizer().clip() > 0 || accum > perPass || planGpus(p) > 1;
}

std::vector<int> unitsSharingParameters(const Plan &p, int unitIndex) {
  std::vector<int> out{unitIndex};
  for (int32_t q : p.units(unitIndex).parameters()) {
    if (q < 0 || q >= p.parameters_size()) continue;
    for (int32_t v : p.parameters(q).units())
      if (v >= 0 && v < p.units_size() && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  std::sort(out.begin() + 1, out.end());
  return out;
}

bool parseSlotEventName(llvm::StringRef name, char &slotKind, int &slot, bool &ready) {
  if (name.size() < 3 || (name[0] != 'w' && name[0] != 'g' && name[0] != 's' && name[0] != 'm')) return false;
  slotKind = name[0];
  auto [num, what] = name.drop_front(1).split('.');
  if (num.empty() || num.getAsInteger(10, slot) || slot < 0) return false;
  if (what != "ready" && what != "free") return false;
  ready = what == "ready";
  return true;
}

std::string checkpointEventName(int j, llvm::StringRef what) { return "c" + std::to_string(j) + "." + what.str(); }

std::set<std::pair<int, int>> loadedCheckpoints(const StreamSchedule &s) {
  std::set<std::pair<int, int>> out;
  for (const StreamAction &a : s.actions())
    if (a.kind() == StreamAction::LOAD_CHECKPOINT) out.insert({a.activation(), a.micro_batch()});
  return out;
}

int64_t checkpointCopyBytes(const Plan &p, const StreamAction &a) {
  if (!isCheckpointCopy(a.kind()) || a.activation() < 0 || a.activation() >= p.activations_size()) return 0;
  return std::max<int64_t>(0, typeBytes(p.activations(a.activation()).type()));
}

llvm::Error checkCheckpointCopies(const Plan &p) {
  const StreamSchedule &s = p.schedule();
  for (const StreamAction &a : s.actions()) {
    if (!isCheckpointCopy(a.kind())) continue;
    if (a.activation() < 0 || a.activation() >= p.activations_size() ||
        p.activations(a.activation()).kind() != Activation::INTERMEDIATE ||
        !blockWithin(a.host_offset(), checkpointCopyBytes(p, a), s.pinned_checkpoint_bytes()))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "the plan's schedule copies a checkpoint that does not exist, or outside its pinned "
                                     "checkpoint memory");
  }
  return llvm::Error::success();
}

const char *regionKindName(DeviceRegion::Kind k) {
  switch (k) {
  case DeviceRegion::WEIGHT_SLOT: return "WEIGHT_SLOT";
  case DeviceRegion::GRAD_SLOT: return "GRAD_SLOT";
  case DeviceRegion::CHECKPOINT: return "CHECKPOINT";
  case DeviceRegion::ACTIVATION_GRAD: return "ACTIVATION_GRAD";
  case DeviceRegion::ARENA: return "ARENA";
  case DeviceRegion::WORKSPACE: return "WORKSPACE";
  case DeviceRegion::DATA: return "DATA";
  case DeviceRegion::CONSTANTS: return "CONSTANTS";
  case DeviceRegion::SAVED: return "SAVED";
  case DeviceRegion::RESIDENT: return "RESIDENT";
  case DeviceRegion::MOMENT_SLOT: return "MOMENT_SLOT";
  case DeviceRegion::LOADED_CHECKPOINT: return "LOADED_CHECKPOINT";
  case DeviceRegion::WEIGHT_COPY: return "WEIGHT_COPY";
  default: return "UNKNOWN_REGION";
  }
}

const char *actionKindName(StreamAction::Kind k) {
  switch (k) {
  case StreamAction::PREFETCH: return "PREFETCH";
  case StreamAction::FORWARD: return "FORWARD";
  case StreamAction::BACKWARD: return "BACKWARD";
  case StreamAction::OFFLOAD: return "OFFLOAD";
  case StreamAction::UPDATE: return "UPDATE";
  case StreamAction::FETCH_MOMENTS: return "FETCH_MOMENTS";
  case StreamAction::WRITEBACK: return "WRITEBACK";
  case StreamAction::SAVE_CHECKPOINT: return "SAVE_CHECKPOINT";
  case StreamAction::LOAD_CHECKPOINT: return "LOAD_CHECKPOINT";
  case StreamAction::UPDATE_UNREAD_ROWS: return "UPDATE_UNREAD_ROWS";
  default: return "UNKNOWN_ACTION";
  }
}

int transferCopies(StreamAction::Kind k) {
  switch (k) {
  case StreamAction::PREFETCH:
  case StreamAction::OFFLOAD: return 1;
  case StreamAction::FETCH_MOMENTS: return 2;
  case StreamAction::WRITEBACK: return 3;
  default: return 0;
  }
}

const char *streamName(StreamAction::Stream s) {
  switch (s) {
  case StreamAction::H2D: return "H2D";
  case StreamAction::COMPUTE: return "COMPUTE";
  case StreamAction::D2H: return "D2H";
  case StreamAction::CPU: return "CPU";
  default: return "UNKNOWN_STREAM";
  }
}

} // namespace megac::plan
