// partition-units: splits the model into stream units: the embedding, one
// unit per transformer layer, and the final norm + head + loss. Layers are
// found from the structure, never from names: the op sequence is cut where a
// single activation is live (the residual stream), and the longest run of
// consecutive, structurally identical groups of segments is the layer stack.
// Each op gets the attribute megac.unit = "embed" | "layer.N" | "head".
// Ops that depend only on parameters (a weight's Transpose) are placed with
// their consumer, and cloned when two units consume them (a tied weight).
#include "passes/Pass.h"
#include "passes/UnitInfo.h"

#include "ir/Printer.h"
#include "runtime/core/Hash.h"

#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <map>
#include <set>

namespace megac::passes {

using namespace ir;

namespace {

struct Analysis {
  std::vector<bool> dynamic; // depends on run-time data
  std::vector<int32_t> dynOps;
};

Analysis analyze(const Graph &g) {
  Analysis a;
  a.dynamic.assign(g.values.size(), false);
  for (ValueId in : g.inputs) a.dynamic[size_t(in)] = true;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op &op = g.ops[i];
    if (op.dead) continue;
    bool d = false;
    for (ValueId in : op.inputs) d |= in != kNoValue && a.dynamic[size_t(in)];
    for (ValueId o : op.outputs)
      if (o != kNoValue) a.dynamic[size_t(o)] = d;
    if (d) a.dynOps.push_back(int32_t(i));
  }
  return a;
}

std::string hashTensor(const Tensor &t) {
  return std::to_string(fnv1a(kFnvOffset, t.raw(), t.nbytes()));
}

std::string attrText(const Attrs &attrs) {
  std::string s;
  llvm::raw_string_ostream os(s);
  for (auto &kv : attrs.all()) {
    if (llvm::StringRef(kv.first).startswith("megac.")) continue;
    os << kv.first << "=";
    printAttr(kv.second, os, {});
    os << ";";
  }
  return os.str();
}

class Partitioner {
public:
  explicit Partitioner(Graph &g) : g_(g), a_(analyze(g)) {}

  llvm::Error run() {
    if (a_.dynOps.empty()) return graphError(g_, "partition-units: no op depends on the model's inputs");
    std::vector<std::pair<size_t, size_t>> segments = cutSegments();
    std::vector<std::string> sigs;
    for (auto &s : segments) sigs.push_back(segmentSignature(s.first, s.second));
    auto [start, period, reps] = findLayers(sigs);
    // Unit of each dynamic op.
    std::vector<std::string> unitOfDyn(a_.dynOps.size());
    for (size_t s = 0; s < segments.size(); ++s) {
      std::string name;
      if (reps >= 1 && s >= start && s < start + period * reps) name = "layer." + std::to_string((s - start) / period);
      else if (s < start) name = "embed";
      else name = "head";
      for (size_t k = segments[s].first; k < segments[s].second; ++k) unitOfDyn[k] = name;
    }
    for (size_t k = 0; k < a_.dynOps.size(); ++k)
      g_.ops[size_t(a_.dynOps[k])].attrs.set(kUnitAttr, Attr::ofString(unitOfDyn[k]));
    placeParameterOps();
    makeUnitsContiguous(unitOfDyn);
    return llvm::Error::success();
  }

private:
  // Cuts after each dynamic op where exactly one dynamic value is live
  // (graph inputs do not count: data is available to every unit).
  std::vector<std::pair<size_t, size_t>> cutSegments() {
    const auto &dyn = a_.dynOps;
    std::vector<int64_t> lastUse(g_.values.size(), -1);
    for (size_t k = 0; k < dyn.size(); ++k)
      for (ValueId in : g_.ops[size_t(dyn[k])].inputs)
        if (in != kNoValue) lastUse[size_t(in)] = int64_t(k);
    for (ValueId o : g_.outputs) lastUse[size_t(o)] = int64_t(dyn.size());
    std::set<ValueId> graphInputs(g_.inputs.begin(), g_.inputs.end());
    std::set<ValueId> live;
    std::vector<std::pair<size_t, size_t>> segs;
    size_t begin = 0;
    for (size_t k = 0; k < dyn.size(); ++k) {
      const Op &op = g_.ops[size_t(dyn[k])];
      for (ValueId in : op.inputs)
        if (in != kNoValue && lastUse[size_t(in)] <= int64_t(k)) live.erase(in);
      for (ValueId o : op.outputs)
        if (o != kNoValue && a_.dynamic[size_t(o)] && lastUse[size_t(o)] > int64_t(k) && !graphInputs.count(o))
          live.insert(o);
      if (live.size() == 1 && k + 1 < dyn.size()) {
        segs.push_back({begin, k + 1});
        begin = k + 1;
      }
    }
    segs.push_back({begin, dyn.size()});
    return segs;
  }

  // A description of value v as seen from inside a segment.
  std::string valueSig(ValueId v, const std::map<ValueId, std::string> &local) {
    auto it = local.find(v);
    if (it != local.end()) return it->second;
    const Value &val = g_.value(v);
    if (val.kind == ValueKind::Param) return "p:" + val.type.str();
    if (val.kind == ValueKind::Const) {
      // Hashed once: every layer reads the same rotary tables ([seq, dim]).
      auto [at, fresh] = constSigs_.try_emplace(v);
      if (fresh) at->second = "c:" + val.type.str() + (val.data ? ":" + hashTensor(*val.data) : ":" + val.name);
      return at->second;
    }
    if (val.kind == ValueKind::Input) return "g:" + val.name;
    if (a_.dynamic[size_t(v)]) return "in:" + val.type.str();
    // A parameter-only computation: describe it structurally.
    const Op &op = g_.ops[size_t(val.producer)];
    std::string s = op.type + "{" + attrText(op.attrs) + "}(";
    for (ValueId in : op.inputs) s += (in == kNoValue ? std::string("_") : valueSig(in, local)) + ",";
    return s + ")";
  }

  std::string segmentSignature(size_t b, size_t e) {
    std::map<ValueId, std::string> local;
    std::string sig;
    for (size_t k = b; k < e; ++k) {
      const Op &op = g_.ops[size_t(a_.dynOps[k])];
      sig += op.type + "{" + attrText(op.attrs) + "}(";
      for (ValueId in : op.inputs) sig += (in == kNoValue ? std::string("_") : valueSig(in, local)) + ",";
      sig += ")->";
      for (size_t o = 0; o < op.outputs.size(); ++o) {
        ValueId out = op.outputs[o];
        if (out == kNoValue) continue;
        local[out] = "t" + std::to_string(k - b) + "." + std::to_string(o);
        sig += g_.type(out).str() + ",";
      }
      sig += ";";
    }
    return sig;
  }

  // The (start, period, repetitions) covering the most segments with a run
  // of identical groups; ties go to the shorter period.
  static std::tuple<size_t, size_t, size_t> findLayers(const std::vector<std::string> &sigs) {
    size_t n = sigs.size(), bestStart = 0, bestPeriod = 0, bestReps = 0, bestCover = 0;
    for (size_t p = 1; p <= n / 2; ++p)
      for (size_t s = 0; s + 2 * p <= n; ++s) {
        size_t reps = 1;
        while (s + (reps + 1) * p <= n &&
               std::equal(sigs.begin() + long(s), sigs.begin() + long(s + p), sigs.begin() + long(s + reps * p)))
          ++reps;
        if (reps >= 2 && reps * p > bestCover) {
          bestCover = reps * p;
          bestStart = s;
          bestPeriod = p;
          bestReps = reps;
        }
      }
    if (bestReps >= 2) return {bestStart, bestPeriod, bestReps};
    // No repetition (a one-layer model): first segment, middle, last segment.
    if (n >= 3) return {1, n - 2, 1};
    return {0, n, 1};
  }

  // Places each parameter-only op in the unit of its consumers, cloning it
  // for every further unit that consumes it.
  void placeParameterOps() {
    auto users = g_.computeUsers();
    std::vector<Op> newOps;
    // Walk backwards so a chain of parameter-only ops follows its consumer.
    for (size_t i = g_.ops.size(); i-- > 0;) {
      Op &op = g_.ops[i];
      if (op.dead || op.attrs.has(kUnitAttr)) continue;
      std::vector<std::string> units;
      for (ValueId o : op.outputs) {
        if (o == kNoValue) continue;
        for (int32_t u : users[size_t(o)])
          if (const Attr *a = g_.ops[size_t(u)].attrs.get(kUnitAttr))
            if (std::find(units.begin(), units.end(), a->s) == units.end()) units.push_back(a->s);
      }
      if (units.empty()) continue; // unused; dce removes it
      op.attrs.set(kUnitAttr, Attr::ofString(units[0]));
      for (size_t k = 1; k < units.size(); ++k) cloneInto(i, units[k], users);
    }
  }

  // Clones op i for `unit`, rewiring that unit's uses to the clone's results.
  void cloneInto(size_t i, const std::string &unit, std::vector<std::vector<int32_t>> &users) {
    Op clone = g_.ops[i];
    clone.name += "@" + unit;
    clone.attrs.set(kUnitAttr, Attr::ofString(unit));
    std::vector<ValueId> oldOuts = clone.outputs;
    for (ValueId &o : clone.outputs) {
      if (o == kNoValue) continue;
      Value v = g_.value(o);
      v.name += "@" + unit;
      v.data.reset();
      o = g_.addValueUnique(std::move(v));
    }
    users.resize(g_.values.size());
    for (size_t k = 0; k < oldOuts.size(); ++k) {
      if (oldOuts[k] == kNoValue) continue;
      for (int32_t u : users[size_t(oldOuts[k])]) {
        Op &user = g_.ops[size_t(u)];
        const Attr *a = user.attrs.get(kUnitAttr);
        if (!a || a->s != unit) continue;
        for (ValueId &in : user.inputs)
          if (in == oldOuts[k]) in = clone.outputs[k];
      }
    }
    g_.insertOp(i + 1, std::move(clone));
    users = g_.computeUsers();
  }

  // Orders the ops unit by unit (a stable sort): parameter-only ops that the
  // exporter placed early (e.g. rotary tables from a weight without data)
  // move into their unit's block. Safe, since they only read parameters,
  // constants and other parameter-only ops of the same unit.
  void makeUnitsContiguous(const std::vector<std::string> &unitOfDyn) {
    std::map<std::string, int> rank;
    for (const std::string &u : unitOfDyn) rank.emplace(u, int(rank.size()));
    g_.compact();
    std::stable_sort(g_.ops.begin(), g_.ops.end(), [&](const Op &a, const Op &b) {
      const Attr *ua = a.attrs.get(kUnitAttr), *ub = b.attrs.get(kUnitAttr);
      int ra = ua ? rank[ua->s] : -1, rb = ub ? rank[ub->s] : -1;
      return ra < rb;
    });
    g_.recomputeProducers();
  }

  Graph &g_;
  Analysis a_;
  std::map<ValueId, std::string> constSigs_; // valueSig of constants
};

} // namespace

llvm::Error partitionUnits(Graph &g, const PassOptions &) {
  for (Op &op : g.ops) op.attrs.erase(kUnitAttr);
  return Partitioner(g).run();
}

} // namespace megac::passes
