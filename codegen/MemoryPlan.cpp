#include "codegen/MemoryPlan.h"

#include <algorithm>
#include <numeric>

namespace megac::plan {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

llvm::Expected<std::vector<ValueLife>> computeLifetimes(const Program &p) {
  const int32_t numValues = p.values_size(), numOps = p.ops_size();
  std::vector<ValueLife> life(static_cast<size_t>(numValues));
  auto inRange = [&](int32_t id) { return id >= -1 && id < numValues; };
  auto name = [&](int32_t id) { return "'" + p.values(id).name() + "'"; };
  for (int32_t k = 0; k < numOps; ++k) {
    const Program::Op &op = p.ops(k);
    for (int i = 0; i < op.inputs_size(); ++i) {
      const int32_t in = op.inputs(i);
      if (!inRange(in)) return err("op " + llvm::Twine(k) + " (" + op.type() + ") reads value " + llvm::Twine(in) + ", which does not exist");
      if (in < 0) continue;
      if (p.values(in).kind() == Program::Value::TEMP && life[size_t(in)].def < 0)
        return err("op " + llvm::Twine(k) + " (" + op.type() + ") reads " + name(in) + " before any op writes it");
      if (readsBytes(op, i)) life[size_t(in)].last = std::max(life[size_t(in)].last, k);
    }
    for (int32_t out : op.outputs()) {
      if (!inRange(out)) return err("op " + llvm::Twine(k) + " (" + op.type() + ") writes value " + llvm::Twine(out) + ", which does not exist");
      if (out < 0) continue;
      ValueLife &l = life[size_t(out)];
      if (p.values(out).kind() != Program::Value::TEMP)
        return err("op " + llvm::Twine(k) + " (" + op.type() + ") writes " + name(out) + ", an argument or constant");
      if (l.def >= 0) return err("value " + name(out) + " is written by ops " + llvm::Twine(l.def) + " and " + llvm::Twine(k));
      int64_t bytes = typeBytes(p.values(out).type());
      if (bytes < 0) return err("value " + name(out) + " has no size (undefined dtype, a negative dimension, or more than 2^62 bytes)");
      l.def = k;
      l.inArena = true;
      l.bytes = alignUp(bytes);
    }
  }
  for (int32_t r : p.results()) {
    if (r < 0 || r >= numValues) return err("a result refers to value " + llvm::Twine(r) + ", which does not exist");
    if (p.values(r).kind() == Program::Value::TEMP && life[size_t(r)].def < 0)
      return err("result " + name(r) + " is never written");
    life[size_t(r)].last = numOps;
  }
  const std::vector<int32_t> roots = viewRoots(p); // every TEMP read here was written: in the arena
  for (int32_t v = 0; v < numValues; ++v) {
    ValueLife &l = life[size_t(v)];
    if (!l.inArena) continue;
    l.last = std::max(l.last, l.def);
    l.root = roots[size_t(v)];
  }
  return life;
}

std::vector<int64_t> placeIntervals(const std::vector<Interval> &blocks, int64_t *totalBytes) {
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (blocks[a].bytes != blocks[b].bytes) return blocks[a].bytes > blocks[b].bytes;
    return blocks[a].first < blocks[b].first;
  });
  std::vector<int64_t> offsets(blocks.size(), 0);
  std::vector<size_t> placed;
  int64_t total = 0;
  for (size_t i : order) {
    const Interval &b = blocks[i];
    std::vector<size_t> conflicts;
    for (size_t j : placed)
      if (blocks[j].bytes > 0 && lifetimesOverlap(b.first, b.last, blocks[j].first, blocks[j].last))
        conflicts.push_back(j);
    std::sort(conflicts.begin(), conflicts.end(), [&](size_t x, size_t y) { return offsets[x] < offsets[y]; });
    int64_t at = 0;
    for (size_t j : conflicts) {
      if (at + b.bytes <= offsets[j]) break;
      at = std::max(at, alignUp(offsets[j] + blocks[j].bytes));
    }
    offsets[i] = at;
    total = std::max(total, at + b.bytes);
    placed.push_back(i);
  }
  *totalBytes = total;
  return offsets;
}

llvm::Expected<ArenaPlan> planArena(const Program &p) {
  auto life = computeLifetimes(p);
  if (!life) return life.takeError();
  // One buffer per root, live until the last reader of any value sharing it.
  std::vector<Interval> buffers;
  std::vector<int32_t> bufferOf(life->size(), -1);
  for (size_t v = 0; v < life->size(); ++v) {
    const ValueLife &l = (*life)[v];
    if (l.inArena && l.root == int32_t(v)) {
      bufferOf[v] = int32_t(buffers.size());
      buffers.push_back({l.def, l.last, l.bytes});
    }
  }
  for (size_t v = 0; v < life->size(); ++v) {
    const ValueLife &l = (*life)[v];
    if (!l.inArena) continue;
    Interval &b = buffers[size_t(bufferOf[size_t(l.root)])];
    b.last = std::max(b.last, int64_t(l.last));
  }
  ArenaPlan ap;
  std::vector<int64_t> at = placeIntervals(buffers, &ap.arenaBytes);
  ap.offsets.assign(life->size(), -1);
  for (size_t v = 0; v < life->size(); ++v)
    if ((*life)[v].inArena) ap.offsets[v] = at[size_t(bufferOf[size_t((*life)[v].root)])];
  // Bytes live at each op index 0..ops_size() (results live at the end).
  std::vector<int64_t> delta(size_t(p.ops_size()) + 2, 0);
  for (const Interval &b : buffers) {
    ap.sumBytes += b.bytes;
    delta[size_t(b.first)] += b.bytes;
    delta[size_t(b.last) + 1] -= b.bytes;
  }
  int64_t live = 0;
  for (int64_t d : delta) {
    live += d;
    ap.lowerBound = std::max(ap.lowerBound, live);
  }
  return ap;
}

llvm::Error assignArena(Program &p) {
  auto ap = planArena(p);
  if (!ap) return ap.takeError();
  p.mutable_arena_offsets()->Assign(ap->offsets.begin(), ap->offsets.end());
  p.set_arena_bytes(ap->arenaBytes);
  return llvm::Error::success();
}

} // namespace megac::plan
