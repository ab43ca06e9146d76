#include "codegen/BuildPlan.h"

#include "codegen/KeepPrograms.h"
#include "codegen/PlanMemory.h"
#include "ir/TiedWeights.h"
#include "passes/Pass.h"
#include "runtime/core/Hash.h"
#include "runtime/plan/AttentionStash.h"
#include "passes/UnitInfo.h"
#include "passes/autodiff/Autodiff.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <map>
#include <optional>
#include <set>

namespace megac::codegen {

using namespace ir;

llvm::Expected<plan::Program> toProgram(const Graph &g, const std::vector<ValueId> &arguments,
                                        const std::vector<ValueId> &results) {
  plan::Program p;
  std::map<ValueId, int32_t> ids;
  auto idOf = [&](ValueId v) -> llvm::Expected<int32_t> {
    auto it = ids.find(v);
    if (it != ids.end()) return it->second;
    const Value &val = g.value(v);
    plan::Program::Value *pv = p.add_values();
    pv->set_name(val.name);
    *pv->mutable_type() = plan::typeProto(val.type.dtype, val.type.shape);
    if (val.kind == ValueKind::Const) {
      pv->set_kind(plan::Program::Value::CONSTANT);
      if (val.data) plan::toProto(*val.data, *pv->mutable_constant());
      else *pv->mutable_constant()->mutable_type() = pv->type(); // no data: the runtime refuses to run it
    } else {
      pv->set_kind(plan::Program::Value::TEMP);
    }
    int32_t id = int32_t(p.values_size() - 1);
    ids[v] = id;
    return id;
  };
  for (ValueId a : arguments) {
    auto id = idOf(a);
    if (!id) return id.takeError();
    p.mutable_values(*id)->set_kind(plan::Program::Value::ARGUMENT);
    p.add_arguments(*id);
  }
  for (const Op &op : g.ops) {
    if (op.dead) continue;
    plan::Program::Op *po = p.add_ops();
    po->set_type(op.type);
    po->set_name(op.name);
    for (ValueId in : op.inputs) {
      if (in == kNoValue) {
        po->add_inputs(-1);
        continue;
      }
      auto id = idOf(in);
      if (!id) return id.takeError();
      po->add_inputs(*id);
    }
    for (ValueId o : op.outputs) {
      if (o == kNoValue) {
        po->add_outputs(-1);
        continue;
      }
      auto id = idOf(o);
      if (!id) return id.takeError();
      po->add_outputs(*id);
    }
    plan::toProto(op.attrs, *po->mutable_attributes());
  }
  for (ValueId r : results) {
    auto id = idOf(r);
    if (!id) return id.takeError();
    p.add_results(*id);
  }
  return p;
}

namespace {

// The unit's ops as a standalone graph whose inputs are its activation
// inputs and parameters.
struct UnitGraph {
  Graph g;
  std::vector<ValueId> actIn, params, actOut;
};

UnitGraph extractUnit(Graph &full, const passes::UnitInfo &u) {
  UnitGraph ug;
  ug.g.name = u.name;
  ug.g.opset = full.opset;
  ug.g.sourcePath = full.sourcePath;
  ug.g.baseDir = full.baseDir;
  std::map<ValueId, ValueId> map;
  auto copyValue = [&](ValueId v, ValueKind kind) {
    Value nv = full.value(v);
    nv.kind = kind;
    nv.producer = -1;
    if (kind != ValueKind::Const) {
      nv.data.reset();
      nv.external.reset();
    } else if (!nv.data && nv.external) {
      auto t = full.tensorOf(v);
      if (t) nv.data = *t;
      else llvm::consumeError(t.takeError());
    }
    ValueId id = ug.g.addValueUnique(std::move(nv));
    map[v] = id;
    return id;
  };
  for (ValueId v : u.activationIn) {
    ug.actIn.push_back(copyValue(v, ValueKind::Input));
    ug.g.inputs.push_back(ug.actIn.back());
  }
  for (ValueId v : u.params) ug.params.push_back(copyValue(v, ValueKind::Param));
  for (int32_t i : u.ops) {
    Op op = full.ops[size_t(i)];
    for (ValueId &in : op.inputs) {
      if (in == kNoValue) continue;
      if (!map.count(in)) copyValue(in, ValueKind::Const);
      in = map[in];
    }
    for (ValueId &o : op.outputs)
      if (o != kNoValue) o = copyValue(o, ValueKind::Result);
    op.attrs.erase(passes::kUnitAttr);
    ug.g.addOp(std::move(op));
  }
  for (ValueId v : u.activationOut) ug.actOut.push_back(map.at(v));
  ug.g.outputs = ug.actOut;
  return ug;
}

// How HF initializes a weight, judged from its use: matrices N(0, 0.02);
// vectors that scale (norm weights) ones; other vectors (biases) zeros.
plan::Parameter::Init initKind(const Graph &g, ValueId p, const std::vector<std::vector<int32_t>> &users) {
  if (g.type(p).shape.size() >= 2) return plan::Parameter::NORMAL;
  std::vector<ValueId> work{p};
  std::set<ValueId> seen{p};
  while (!work.empty()) {
    ValueId v = work.back();
    work.pop_back();
    for (int32_t u : users[size_t(v)]) {
      const Op &op = g.ops[size_t(u)];
      if (op.type == "Mul") return plan::Parameter::ONES;
      if ((op.type == "LayerNormalization" || op.type == "RMSNormalization") && op.inputs.size() > 1 &&
          op.inputs[1] == v)
        return plan::Parameter::ONES;
      if (op.type == "Cast" || op.type == "Reshape" || op.type == "Unsqueeze" || op.type == "Expand" ||
          op.type == "Identity")
        for (ValueId o : op.outputs)
          if (o != kNoValue && seen.insert(o).second) work.push_back(o);
    }
  }
  return plan::Parameter::ZEROS;
}

} // namespace

llvm::Expected<plan::Plan> buildPlan(Graph &g, const CodegenOptions &opts) {
  auto units = passes::collectUnits(g);
  if (!units) return units.takeError();
  plan::Plan plan;
  plan.set_format_version(plan::kFormatVersion);
  plan.set_megac_version(plan::kMegacVersion);
  llvm::SmallString<256> abs(opts.modelPath);
  llvm::sys::fs::make_absolute(abs);
  plan.set_model_path(std::string(abs));
  plan.set_model_hash(g.sourceModelHash);
  plan.set_compute(opts.compute);
  plan.set_ignore_index(opts.ignoreIndex);
  *plan.mutable_optimizer() = opts.optimizer;
  if (g.inputs.size() < 2) return graphError(g, "codegen: expected the token input and the targets (run append-loss)");
  const TensorType &tok = g.type(g.inputs[0]);
  if (tok.shape.size() != 2) return graphError(g, "codegen: the token input must be [batch, seq], got " + tok.str());
  plan.set_batch(tok.shape[0]);
  plan.set_seq(tok.shape[1]);

  // Activations: every value that crosses units, plus the data inputs.
  std::map<ValueId, int32_t> actId;
  auto activation = [&](ValueId v) {
    auto it = actId.find(v);
    if (it != actId.end()) return it->second;
    plan::Activation *a = plan.add_activations();
    a->set_name(g.value(v).name);
    *a->mutable_type() = plan::typeProto(g.type(v).dtype, g.type(v).shape);
    if (v == g.inputs[0]) a->set_kind(plan::Activation::DATA_TOKENS);
    else if (v == g.inputs.back()) a->set_kind(plan::Activation::DATA_TARGETS);
    else if (v == g.outputs[0]) a->set_kind(plan::Activation::LOSS);
    int32_t id = int32_t(plan.activations_size() - 1);
    actId[v] = id;
    return id;
  };
  activation(g.inputs[0]);
  activation(g.inputs.back());

  // Parameters, in order of first use.
  std::map<ValueId, int32_t> paramId;
  auto users = g.computeUsers();
  const std::set<ValueId> tied = ir::tiedEmbeddingHeads(g);
  int64_t offset = 0;
  uint64_t hash = kFnvOffset;
  bool allData = true;
  // Host layout: each unit's new parameters form one 4 KB-aligned block, each
  // parameter 256-byte aligned in unit order, which is the weight-slot layout
  // (plan::unitWeightLayout): the GPU runtime streams such a unit in one DMA.
  for (size_t ui = 0; ui < units->size(); ++ui) {
    offset = (offset + 1023) / 1024 * 1024;
    for (ValueId p : (*units)[ui].params) {
      if (paramId.count(p)) {
        plan.mutable_parameters(paramId[p])->add_units(int32_t(ui));
        continue;
      }
      const Value &v = g.value(p);
      plan::Parameter *pp = plan.add_parameters();
      pp->set_name(v.name);
      *pp->mutable_type() = plan::typeProto(megac::DType::F32, v.type.shape);
      int64_t n = numElements(v.type.shape);
      pp->set_numel(n);
      pp->set_host_offset(offset);
      offset += (n + 63) / 64 * 64;
      pp->set_has_data(v.hasData());
      pp->set_init(initKind(g, p, users));
      pp->set_init_std(0.02f);
      pp->set_decay(true);
      pp->set_tied_embedding_head(tied.count(p) > 0);
      pp->add_units(int32_t(ui));
      paramId[p] = int32_t(plan.parameters_size() - 1);
      if (!v.hasData()) allData = false;
      if (opts.hashWeights && v.hasData()) {
        auto t = g.tensorOf(p);
        if (!t) return t.takeError();
        hash = fnv1a(hash, t->raw(), t->nbytes());
      }
      if (v.type.dtype != megac::DType::F32)
        return graphError(g, "parameter '" + v.name + "' is " + dtypeName(v.type.dtype) +
                                 "; megac trains fp32 master weights: export the model in float32");
    }
  }
  int64_t total = 0;
  for (const auto &p : plan.parameters()) total += p.numel();
  plan.set_total_parameters(total);
  plan.set_weights_hash(allData && opts.hashWeights ? hash : 0);
  for (const Op &op : g.ops)
    if (!op.dead && op.type == "megac.SoftmaxCrossEntropy") plan.set_vocab(g.type(op.inputs[0]).shape.back());
    else if (!op.dead && op.type == "megac.LinearCrossEntropy")
      plan.set_vocab(g.type(op.inputs[1]).shape[op.attrs.getInt("trans_w", 0) ? 0 : 1]);
  if (plan.vocab() == 0) return graphError(g, "codegen: no loss in the graph (run append-loss)");

  std::map<std::string, int32_t> templateByKey;
  for (size_t ui = 0; ui < units->size(); ++ui) {
    const passes::UnitInfo &u = (*units)[ui];
    UnitGraph ug = extractUnit(g, u);
    std::vector<ValueId> fwdArgs = ug.actIn;
    fwdArgs.insert(fwdArgs.end(), ug.params.begin(), ug.params.end());
    auto fwd = toProgram(ug.g, fwdArgs, ug.actOut);
    if (!fwd) return fwd.takeError();
    // Units with byte-identical programs (names aside) share a template.
    plan::Program key = *fwd;
    for (auto &v : *key.mutable_values()) v.clear_name();
    for (auto &o : *key.mutable_ops()) o.clear_name();
    std::string keyBytes;
    key.SerializeToString(&keyBytes);
    auto it = templateByKey.find(keyBytes);
    int32_t tid;
    if (it != templateByKey.end()) {
      tid = it->second;
    } else {
      plan::Template *t = plan.add_templates();
      t->set_name(u.name);
      t->set_num_activation_inputs(int32_t(ug.actIn.size()));
      t->set_num_parameters(int32_t(ug.params.size()));
      t->set_num_activation_outputs(int32_t(ug.actOut.size()));
      *t->mutable_forward() = std::move(*fwd);
      // Backward: forward recomputation plus gradients.
      const Graph forwardGraph = ug.g;
      Graph &bg = ug.g;
      const size_t numForwardOps = bg.ops.size();
      std::vector<ValueId> seeds;
      for (ValueId o : ug.actOut) {
        Value s;
        s.name = "d:" + bg.value(o).name;
        s.kind = ValueKind::Input;
        s.type = bg.type(o);
        seeds.push_back(bg.addValueUnique(std::move(s)));
      }
      std::vector<ValueId> wrt;
      for (ValueId a : ug.actIn) {
        bool f = isFloatType(bg.type(a).dtype);
        t->add_input_has_gradient(f);
        if (f) wrt.push_back(a);
      }
      wrt.insert(wrt.end(), ug.params.begin(), ug.params.end());
      auto r = autodiff::differentiate(bg, ug.actOut, seeds, wrt);
      if (!r) return r.takeError();
      std::vector<ValueId> results;
      for (size_t k = 0; k < wrt.size(); ++k) {
        ValueId gv = r->grads[k];
        if (gv == kNoValue) gv = bg.addConst("zeros", Tensor(bg.type(wrt[k]).dtype, bg.type(wrt[k]).shape));
        results.push_back(gv);
      }
      // Sums of gradient contributions into the products' epilogues (fuse-add-into-gemm).
      passes::fuseAddsIntoGemms(bg, numForwardOps, results);
      // Drop the forward ops the gradients do not need.
      passes::markUnusedOpsDead(bg, results);
      std::vector<ValueId> bwdArgs = fwdArgs;
      bwdArgs.insert(bwdArgs.end(), seeds.begin(), seeds.end());
      // A block run over chunks of the sequence (chunk-sequence) is
      // recomputed a chunk at a time, each right before its gradients (on a
      // copy: the keep programs below read the ops in autodiff's order).
      std::optional<Graph> sunk;
      for (size_t i = 0; i < numForwardOps && !sunk; ++i)
        if (!bg.ops[i].dead && bg.ops[i].attrs.has("megac.chunk")) {
          sunk.emplace(bg);
          passes::sinkChunkRecomputation(*sunk, numForwardOps);
        }
      auto bwd = toProgram(sunk ? *sunk : bg, bwdArgs, results);
      if (!bwd) return bwd.takeError();
      *t->mutable_backward() = std::move(*bwd);
      if (opts.stashAttentionOperands) plan::markStashedAttentionOperands(*t->mutable_backward(), plan.compute());
      if (auto e = addKeepPrograms({&forwardGraph, &bg, numForwardOps, fwdArgs, ug.actOut, bwdArgs, results}, *t))
        return std::move(e);
      tid = int32_t(plan.templates_size() - 1);
      templateByKey[keyBytes] = tid;
    }
    plan::Unit *pu = plan.add_units();
    pu->set_name(u.name);
    pu->set_template_id(tid);
    for (ValueId a : u.activationIn) pu->add_activation_inputs(activation(a));
    for (ValueId p : u.params) pu->add_parameters(paramId.at(p));
    for (ValueId o : u.activationOut) pu->add_activation_outputs(activation(o));
  }
  if (auto e = assignArenas(plan)) return std::move(e);
  return plan;
}

} // namespace megac::codegen
