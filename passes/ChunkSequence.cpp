// chunk-sequence: a unit's MLP block runs over chunks of the sequence
// (issue 24; ALST's "tiled MLP"). At long context the block's per-token
// intermediates are a layer's largest buffers: the 2.8B bench model's
// [seq, 8192] fp32 gate, up and SwiGLU values take 8.6 GB each at 262,144
// tokens. Every op of the block treats each token's row alone, so the block
// may run on K slices of the sequence in turn:
//     x_0..x_{K-1} = Split(x, axis = seq)      for each input x of the block
//     y_c = block(x_c)                           K copies, chunk 0 first
//     y = Concat(y_0..y_{K-1}, axis = seq)       for each output y
// and its intermediates take a K-th of the memory (the arena reuses chunk
// c's for chunk c+1). The block: a connected set of row-wise ops of one unit
// (RMSNormalization and LayerNormalization over the last axis, MatMul and
// Gemm by a weight, megac.SwiGLU, elementwise ops on rows of one shape or
// with a weight broadcast to every row, Reshapes that keep the rows) holding an MLP activation (megac.SwiGLU or
// Gelu). Attention, which mixes the rows, stays whole; so do blocks without
// an MLP (their values are no wider than the checkpoints).
//
// The copies carry megac.chunk = c: codegen recomputes each chunk in the
// backward right before its gradients (sinkChunkRecomputation), so that the
// backward's intermediates shrink too. The arithmetic is the unchunked
// block's row for row; the weights' gradients become sums of K partial
// products (another summation order).
//
// PassOptions::sequenceChunks = K (1: nothing to do); K must divide seq.
#include "passes/Match.h"
#include "passes/Pass.h"
#include "passes/UnitInfo.h"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <set>

namespace megac::passes {

using namespace ir;

namespace {

constexpr const char *kChunkAttr = "megac.chunk";

class Chunker {
public:
  Chunker(Graph &g, int64_t batch, int64_t seq, int64_t k)
      : g_(g), B_(batch), S_(seq), K_(k), mt_(std::make_unique<Matcher>(g)) {}

  llvm::Error run();

private:
  // The axis of v along which its rows (tokens) run: 1 for [B, S, ...], 0 for [B * S, ...]; -1 otherwise.
  int rowAxis(ValueId v) const {
    if (v == kNoValue || g_.value(v).kind != ValueKind::Result) return -1;
    const Shape &s = g_.type(v).shape;
    if (s.size() >= 3 && s[0] == B_ && s[1] == S_) return 1;
    if (s.size() == 2 && s[0] == B_ * S_) return 0;
    return -1;
  }
  bool isRow(ValueId v) const { return rowAxis(v) >= 0; }
  bool rowWise(const Op &op) const;
  std::string unitOf(const Op &op) const { return op.attrs.getString(kUnitAttr, ""); }
  // Rewrites one block into its slices; false where it stays whole.
  llvm::Expected<bool> chunk(const std::vector<int32_t> &region);

  Graph &g_;
  int64_t B_, S_, K_;
  std::unique_ptr<Matcher> mt_; // rebuilt after each rewrite
};

bool Chunker::rowWise(const Op &op) const {
  if (op.dead || op.outputs.size() != 1 || !isRow(op.outputs[0])) return false;
  const Shape &ys = g_.type(op.outputs[0]).shape;
  auto sameRows = [&](size_t from) {
    for (size_t i = from; i < op.inputs.size(); ++i)
      if (!hasInput(op, i) || !isRow(op.inputs[i]) || g_.type(op.inputs[i]).shape != ys) return false;
    return true;
  };
  auto weight = [&](size_t i) { return hasInput(op, i) && !isRow(op.inputs[i]) && g_.type(op.inputs[i]).shape.size() <= 2; };
  const std::string &t = op.type;
  if (t == "RMSNormalization" || t == "LayerNormalization") {
    const int64_t axis = op.attrs.getInt("axis", -1);
    if (axis != -1 && axis != int64_t(ys.size()) - 1) return false;
    if (!hasInput(op, 0) || g_.type(op.inputs[0]).shape != ys) return false;
    for (size_t i = 1; i < op.inputs.size(); ++i)
      if (hasInput(op, i) && (!weight(i) || g_.type(op.inputs[i]).shape.size() != 1)) return false;
    return isRow(op.inputs[0]);
  }
  if (t == "MatMul")
    return op.inputs.size() == 2 && hasInput(op, 0) && isRow(op.inputs[0]) && weight(1) && g_.type(op.inputs[1]).shape.size() == 2 &&
           rowAxis(op.inputs[0]) == rowAxis(op.outputs[0]);
  if (t == "Gemm") {
    if (op.attrs.getInt("transA", 0) != 0 || !hasInput(op, 0) || rowAxis(op.inputs[0]) != 0 || !weight(1)) return false;
    if (!hasInput(op, 2)) return true;
    const Shape &cs = g_.type(op.inputs[2]).shape;
    return isRow(op.inputs[2]) ? cs == ys : cs.size() == 1 || (cs.size() == 2 && cs[0] == 1); // C: rows, or a bias
  }
  if (t == "megac.SwiGLU") return op.inputs.size() == 2 && sameRows(0);
  if (t == "Add" || t == "Mul" || t == "Sub" || t == "Div") {
    // Rows of the output's shape, or a weight broadcast to every row (a bias: 1 or absent on the row axes).
    if (op.inputs.size() != 2) return false;
    bool anyRow = false;
    for (size_t i = 0; i < 2; ++i) {
      if (!hasInput(op, i)) return false;
      const Shape &xs = g_.type(op.inputs[i]).shape;
      if (isRow(op.inputs[i])) {
        if (xs != ys) return false;
        anyRow = true;
        continue;
      }
      if (xs.size() > ys.size()) return false;
      const size_t lead = ys.size() - xs.size(); // right-aligned
      for (size_t d = 0; d <= size_t(rowAxis(op.outputs[0])); ++d)
        if (d >= lead && xs[d - lead] != 1) return false;
    }
    return anyRow;
  }
  if (t == "Gelu" || t == "Relu" || t == "Sigmoid" || t == "Tanh" || t == "Identity") return op.inputs.size() == 1 && sameRows(0);
  if (t == "Reshape") { // rows kept: [B, S, ...] <-> [B * S, ...] <-> [B, S, ...]
    if (!hasInput(op, 0) || !isRow(op.inputs[0])) return false;
    const Shape &xs = g_.type(op.inputs[0]).shape;
    return numElements(xs) == numElements(ys);
  }
  return false;
}

llvm::Error Chunker::run() {
  // One block at a time, found afresh after each rewrite (op indices move;
  // value ids do not): the slices' copies (megac.chunk) are not candidates,
  // nor a block left whole (known by its first op's output).
  std::set<ValueId> leftWhole;
  for (;;) {
    const int32_t n = int32_t(g_.ops.size());
    std::vector<int32_t> parent(static_cast<size_t>(n));
    std::iota(parent.begin(), parent.end(), 0);
    auto find = [&](int32_t x) {
      while (parent[size_t(x)] != x) x = parent[size_t(x)] = parent[size_t(parent[size_t(x)])];
      return x;
    };
    std::vector<bool> rw(static_cast<size_t>(n), false);
    for (int32_t i = 0; i < n; ++i) {
      const Op &op = g_.ops[size_t(i)];
      rw[size_t(i)] = !op.attrs.has(kChunkAttr) && !unitOf(op).empty() && rowWise(op);
    }
    // Row-wise ops of one unit joined by the rows they pass on.
    for (int32_t i = 0; i < n; ++i) {
      if (!rw[size_t(i)]) continue;
      for (ValueId v : g_.ops[size_t(i)].outputs)
        for (int32_t u : mt_->users(v))
          if (rw[size_t(u)] && unitOf(g_.ops[size_t(u)]) == unitOf(g_.ops[size_t(i)])) parent[size_t(find(u))] = find(i);
    }
    std::map<int32_t, std::vector<int32_t>> regions;
    for (int32_t i = 0; i < n; ++i)
      if (rw[size_t(i)]) regions[find(i)].push_back(i);
    const std::vector<int32_t> *next = nullptr;
    for (const auto &[root, ops] : regions) {
      if (leftWhole.count(g_.ops[size_t(ops.front())].outputs[0])) continue;
      for (int32_t i : ops)
        if (g_.ops[size_t(i)].type == "megac.SwiGLU" || g_.ops[size_t(i)].type == "Gelu") next = &ops;
      if (next) break;
    }
    if (!next) return llvm::Error::success();
    auto chunked = chunk(*next);
    if (!chunked) return chunked.takeError();
    if (!*chunked) leftWhole.insert(g_.ops[size_t(next->front())].outputs[0]);
  }
}

llvm::Expected<bool> Chunker::chunk(const std::vector<int32_t> &region) {
  const std::set<int32_t> in(region.begin(), region.end());
  const int32_t last = region.back();
  // The block's inputs (rows from outside it) and outputs (rows read outside it).
  std::vector<ValueId> inputs, outputs;
  std::set<ValueId> produced;
  for (int32_t i : region)
    for (ValueId v : g_.ops[size_t(i)].outputs) produced.insert(v);
  for (int32_t i : region) {
    const Op &op = g_.ops[size_t(i)];
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      ValueId v = op.inputs[k];
      if (op.type == "Reshape" && k == 1) continue; // the target shape: one per chunk below
      if (isRow(v) && !produced.count(v) && std::find(inputs.begin(), inputs.end(), v) == inputs.end()) inputs.push_back(v);
    }
    for (ValueId v : op.outputs) {
      bool outside = mt_->isOutput(v);
      for (int32_t u : mt_->users(v)) {
        if (in.count(u)) continue;
        if (u < last) return false; // read between the block's ops: leave it whole
        outside = true;
      }
      if (outside) outputs.push_back(v);
    }
  }
  // With several sequences a batch, rows [B * S, ...] cannot be cut by sequence position at the block's edge.
  for (ValueId v : inputs)
    if (B_ > 1 && rowAxis(v) == 0) return false;
  for (ValueId v : outputs)
    if (B_ > 1 && rowAxis(v) == 0) return false;

  const Op &lastOp = g_.ops[size_t(last)];
  const std::string unit = unitOf(lastOp);
  Attrs unitAttrs;
  unitAttrs.set(kUnitAttr, Attr::ofString(unit));
  auto chunkType = [&](ValueId v) {
    TensorType t = g_.type(v);
    t.shape[size_t(rowAxis(v))] /= K_;
    return t;
  };
  std::vector<Op> added;
  // chunkOf[c][v]: chunk c's value for row value v.
  std::vector<std::map<ValueId, ValueId>> chunkOf(static_cast<size_t>(K_));
  // Slice c of row value v, a new value.
  auto slice = [&](ValueId v, int64_t c) {
    Value s;
    s.name = g_.value(v).name + "/c" + std::to_string(c);
    s.type = chunkType(v);
    ValueId id = g_.addValueUnique(std::move(s));
    chunkOf[size_t(c)][v] = id;
    return id;
  };
  // The Split of an input or the Concat of an output, along v's rows.
  auto edge = [&](const char *type, ValueId v) {
    Op op;
    op.type = type;
    op.name = g_.value(v).name + "/chunks";
    op.attrs = unitAttrs;
    op.attrs.set("axis", Attr::ofInt(rowAxis(v)));
    return op;
  };
  for (ValueId x : inputs) {
    Op split = edge("Split", x);
    const int64_t rows = g_.type(x).shape[size_t(rowAxis(x))] / K_;
    split.inputs = {x, g_.addConst(split.name + "/sizes", Tensor::fromVector<int64_t>(DType::I64, {K_}, std::vector<int64_t>(size_t(K_), rows)))};
    for (int64_t c = 0; c < K_; ++c) split.outputs.push_back(slice(x, c));
    added.push_back(std::move(split));
  }
  std::map<int32_t, ValueId> chunkShape; // per Reshape of the block: its target shape for a chunk
  for (int32_t i : region)
    if (g_.ops[size_t(i)].type == "Reshape")
      chunkShape[i] = shapeConst(g_, g_.ops[size_t(i)].name + "/chunk_shape", chunkType(g_.ops[size_t(i)].outputs[0]).shape);
  for (int64_t c = 0; c < K_; ++c) {
    for (int32_t i : region) {
      const Op &op = g_.ops[size_t(i)];
      Op copy = op;
      copy.name = op.name + "/c" + std::to_string(c);
      copy.attrs.set(kChunkAttr, Attr::ofInt(c));
      for (size_t k = 0; k < copy.inputs.size(); ++k) {
        ValueId v = copy.inputs[k];
        if (op.type == "Reshape" && k == 1) {
          copy.inputs[k] = chunkShape.at(i);
          continue;
        }
        auto it = chunkOf[size_t(c)].find(v);
        if (it != chunkOf[size_t(c)].end()) copy.inputs[k] = it->second;
        else if (isRow(v)) return graphError(g_, "chunk-sequence: '" + g_.value(v).name + "' has no slice (internal error)");
      }
      for (ValueId &o : copy.outputs) o = slice(o, c);
      added.push_back(std::move(copy));
    }
  }
  for (ValueId y : outputs) {
    Op concat = edge("Concat", y);
    for (int64_t c = 0; c < K_; ++c) concat.inputs.push_back(chunkOf[size_t(c)].at(y));
    concat.outputs = {y};
    added.push_back(std::move(concat));
  }
  // The block's ops make way for the chunks, at the place of its last op.
  std::vector<Op> ops;
  ops.reserve(g_.ops.size() + added.size());
  for (int32_t i = 0; i < int32_t(g_.ops.size()); ++i) {
    if (i == last)
      for (Op &a : added) ops.push_back(std::move(a));
    if (!in.count(i)) ops.push_back(std::move(g_.ops[size_t(i)]));
  }
  g_.ops = std::move(ops);
  g_.recomputeProducers();
  mt_ = std::make_unique<Matcher>(g_);
  return true;
}

} // namespace

llvm::Error chunkSequence(Graph &g, const PassOptions &opts) {
  const int64_t k = opts.sequenceChunks;
  if (k <= 1) return llvm::Error::success();
  if (g.inputs.empty() || g.type(g.inputs[0]).shape.size() != 2)
    return graphError(g, "chunk-sequence: the first input is not [batch, seq]");
  const int64_t batch = g.type(g.inputs[0]).shape[0], seq = g.type(g.inputs[0]).shape[1];
  if (seq % k != 0)
    return graphError(g, "chunk-sequence: " + llvm::Twine(k) + " chunks do not divide seq " + llvm::Twine(seq));
  return Chunker(g, batch, seq, k).run();
}

void sinkChunkRecomputation(Graph &g, size_t numForwardOps) {
  // Each recomputed chunk op moves to just before its first reader, from
  // the last one back, so that a chunk's chain follows it down: chunk c is
  // recomputed where its gradients start, not with the whole forward.
  const size_t n = g.ops.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = numForwardOps; i-- > 0;) {
    const Op &op = g.ops[i];
    if (op.dead || !op.attrs.has(kChunkAttr)) continue;
    auto pos = std::find(order.begin(), order.end(), i);
    // The first reader after it, in the current order.
    auto reader = order.end();
    for (auto it = pos + 1; it != order.end(); ++it) {
      const Op &u = g.ops[*it];
      if (u.dead) continue;
      bool reads = false;
      for (ValueId in : u.inputs)
        for (ValueId o : op.outputs) reads |= in != kNoValue && in == o;
      if (reads) {
        reader = it;
        break;
      }
    }
    if (reader == order.end() || reader == pos + 1) continue;
    const size_t moved = *pos, before = *reader;
    order.erase(pos);
    order.insert(std::find(order.begin(), order.end(), before), moved);
  }
  std::vector<Op> ops;
  ops.reserve(n);
  for (size_t i : order) ops.push_back(std::move(g.ops[i]));
  g.ops = std::move(ops);
  g.recomputeProducers();
}

} // namespace megac::passes
