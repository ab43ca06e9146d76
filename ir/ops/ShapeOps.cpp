// Type inference for the shape / data-movement family (newest-opset forms;
// older forms are rewritten by frontend/import/ShapeImports.cpp).
#include "ir/ops/ShapeOps.h"

#include "ir/OpSchema.h"
#include "runtime/cpu/ShapeSemantics.h"

#include <algorithm>
#include <set>

namespace megac::ir {

namespace {

// Input i as a tensor type (an error for sequences, which only the
// sequence ops take).
llvm::Expected<const TensorType *> tensorInput(InferContext &c, size_t i) {
  const TensorType *t = c.inputType(i);
  if (!t) return c.error("input " + llvm::Twine(i) + " is required");
  if (t->isSequence)
    return c.error("input " + llvm::Twine(i) + " is a sequence; this op takes a tensor");
  return t;
}

// The values of constant integer input i (for shapes, axes, pads...).
llvm::Expected<std::vector<int64_t>> constInts(InferContext &c, size_t i, llvm::StringRef what) {
  auto t = c.requireConst(i, what);
  if (!t) return t.takeError();
  if (!isIntegerType((*t)->dtype()))
    return c.error(what + " must be an integer tensor, got " + dtypeName((*t)->dtype()));
  return (*t)->toInt64Vector();
}

// constInts for an optional input: empty when omitted.
llvm::Expected<std::vector<int64_t>> optionalConstInts(InferContext &c, size_t i, llvm::StringRef what) {
  if (!c.hasInput(i)) return std::vector<int64_t>{};
  return constInts(c, i, what);
}

llvm::Error wrap(InferContext &c, llvm::Error e) {
  if (!e) return e;
  return c.error(llvm::toString(std::move(e)));
}

llvm::Error requireIntegerInput(InferContext &c, size_t i, llvm::StringRef what) {
  const TensorType *t = c.inputType(i);
  if (t && !isIntegerType(t->dtype))
    return c.error(what + " must be an integer tensor, got " + dtypeName(t->dtype));
  return llvm::Error::success();
}

int64_t rankOf(const TensorType &t) { return int64_t(t.shape.size()); }

// ---- Shape, Size: results known from types alone ----

llvm::Error inferShape(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  int64_t rank = rankOf(**in);
  auto clampIndex = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  int64_t start = clampIndex(c.attrs().getInt("start", 0));
  int64_t end = c.attrs().has("end") ? clampIndex(c.attrs().getInt("end", rank)) : rank;
  std::vector<int64_t> dims;
  for (int64_t d = start; d < end; ++d) dims.push_back((*in)->shape[size_t(d)]);
  c.setOutputValue(0, Tensor::fromVector<int64_t>(DType::I64, {int64_t(dims.size())}, dims));
  return llvm::Error::success();
}

llvm::Error inferSize(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  c.setOutputValue(0, Tensor::fromVector<int64_t>(DType::I64, {}, {numElements((*in)->shape)}));
  return llvm::Error::success();
}

// ---- Reshape family ----

llvm::Error inferReshape(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  auto shape = constInts(c, 1, "shape");
  if (!shape) return shape.takeError();
  bool allowZero = c.attrs().getInt("allowzero", 0) != 0;
  const Shape &inShape = (*in)->shape;
  Shape out;
  int64_t inferred = -1, known = 1;
  bool sawZero = false;
  for (size_t i = 0; i < shape->size(); ++i) {
    int64_t v = (*shape)[i];
    if (v == 0 && !allowZero) {
      if (i >= inShape.size())
        return c.error("shape entry " + llvm::Twine(i) + " is 0 (copy the input dim) but the input " +
                       shapeToString(inShape) + " has no dim " + llvm::Twine(i));
      v = inShape[i];
    } else if (v == 0) {
      sawZero = true;
    }
    if (v == -1) {
      if (inferred >= 0) return c.error("shape " + shapeToString(*shape) + " has more than one -1");
      inferred = int64_t(i);
      out.push_back(-1);
      continue;
    }
    if (v < 0) return c.error("shape " + shapeToString(*shape) + " has the invalid entry " + llvm::Twine(v));
    out.push_back(v);
    known *= v;
  }
  if (allowZero && sawZero && inferred >= 0)
    return c.error("shape " + shapeToString(*shape) + " has both 0 and -1, which allowzero=1 forbids");
  int64_t total = numElements(inShape);
  if (inferred >= 0) {
    if (known == 0 || total % known != 0)
      return c.error("cannot reshape " + shapeToString(inShape) + " to " + shapeToString(*shape) +
                     ": the -1 dim cannot be inferred");
    out[size_t(inferred)] = total / known;
  }
  if (numElements(out) != total)
    return c.error("cannot reshape " + shapeToString(inShape) + " (" + llvm::Twine(total) + " elements) to " +
                   shapeToString(out));
  c.setOutput(0, (*in)->dtype, out);
  return llvm::Error::success();
}

llvm::Error inferTranspose(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  int64_t rank = rankOf(**in);
  std::vector<int64_t> perm = c.attrs().getInts("perm");
  if (!c.attrs().has("perm"))
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  if (int64_t(perm.size()) != rank)
    return c.error("perm has " + llvm::Twine(perm.size()) + " entries for an input of rank " + llvm::Twine(rank));
  std::vector<bool> used(size_t(rank), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || used[size_t(p)])
      return c.error("perm " + shapeToString(perm) + " is not a permutation of 0.." + llvm::Twine(rank - 1));
    used[size_t(p)] = true;
    out.push_back((*in)->shape[size_t(p)]);
  }
  c.setOutput(0, (*in)->dtype, out);
  return llvm::Error::success();
}

// Normalizes axes against rank; error on duplicates.
llvm::Expected<std::vector<int64_t>> normalizeAxes(InferContext &c, const std::vector<int64_t> &axes, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    auto n = normalizeAxis(c, a, rank);
    if (!n) return n.takeError();
    if (std::find(out.begin(), out.end(), *n) != out.end())
      return c.error("axis " + llvm::Twine(a) + " is listed twice in " + shapeToString(axes));
    out.push_back(*n);
  }
  return out;
}

llvm::Error inferSqueeze(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  const Shape &s = (*in)->shape;
  auto axesRaw = optionalConstInts(c, 1, "axes");
  if (!axesRaw) return axesRaw.takeError();
  std::vector<bool> drop(s.size(), false);
  if (c.hasInput(1)) {
    auto axes = normalizeAxes(c, *axesRaw, int64_t(s.size()));
    if (!axes) return axes.takeError();
    for (int64_t a : *axes) {
      if (s[size_t(a)] != 1)
        return c.error("cannot squeeze axis " + llvm::Twine(a) + " of " + shapeToString(s) + ": its size is not 1");
      drop[size_t(a)] = true;
    }
  } else {
    for (size_t d = 0; d < s.size(); ++d) drop[d] = s[d] == 1;
  }
  Shape out;
  for (size_t d = 0; d < s.size(); ++d)
    if (!drop[d]) out.push_back(s[d]);
  c.setOutput(0, (*in)->dtype, out);
  return llvm::Error::success();
}

llvm::Error inferUnsqueeze(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  auto axesRaw = constInts(c, 1, "axes");
  if (!axesRaw) return axesRaw.takeError();
  const Shape &s = (*in)->shape;
  int64_t outRank = int64_t(s.size() + axesRaw->size());
  auto axes = normalizeAxes(c, *axesRaw, outRank);
  if (!axes) return axes.takeError();
  Shape out(size_t(outRank), 1);
  std::vector<bool> isNew(size_t(outRank), false);
  for (int64_t a : *axes) isNew[size_t(a)] = true;
  size_t next = 0;
  for (int64_t d = 0; d < outRank; ++d)
    if (!isNew[size_t(d)]) out[size_t(d)] = s[next++];
  c.setOutput(0, (*in)->dtype, out);
  return llvm::Error::success();
}

llvm::Error inferFlatten(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  const Shape &s = (*in)->shape;
  int64_t rank = rankOf(**in), axis = c.attrs().getInt("axis", 1);
  if (axis < -rank || axis > rank)
    return c.error("axis " + llvm::Twine(axis) + " is out of range [" + llvm::Twine(-rank) + ", " + llvm::Twine(rank) +
                   "]");
  if (axis < 0) axis += rank;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) (d < axis ? outer : inner) *= s[size_t(d)];
  c.setOutput(0, (*in)->dtype, {outer, inner});
  return llvm::Error::success();
}

// ---- Concat, Split, Slice ----

llvm::Error inferConcat(InferContext &c) {
  auto first = tensorInput(c, 0);
  if (!first) return first.takeError();
  int64_t rank = rankOf(**first);
  if (rank == 0) return c.error("cannot concatenate scalars");
  if (!c.attrs().has("axis")) return c.error("attribute 'axis' is required");
  auto axis = normalizeAxis(c, c.attrs().getInt("axis", 0), rank);
  if (!axis) return axis.takeError();
  Shape out = (*first)->shape;
  out[size_t(*axis)] = 0;
  for (size_t i = 0; i < c.numInputs(); ++i) {
    auto t = tensorInput(c, i);
    if (!t) return t.takeError();
    if ((*t)->dtype != (*first)->dtype)
      return c.error("input " + llvm::Twine(i) + " is " + dtypeName((*t)->dtype) + ", input 0 is " +
                     dtypeName((*first)->dtype));
    if (rankOf(**t) != rank)
      return c.error("input " + llvm::Twine(i) + " " + shapeToString((*t)->shape) + " and input 0 " +
                     shapeToString((*first)->shape) + " differ in rank");
    for (int64_t d = 0; d < rank; ++d)
      if (d != *axis && (*t)->shape[size_t(d)] != (*first)->shape[size_t(d)])
        return c.error("input " + llvm::Twine(i) + " " + shapeToString((*t)->shape) + " and input 0 " +
                       shapeToString((*first)->shape) + " differ outside axis " + llvm::Twine(*axis));
    out[size_t(*axis)] += (*t)->shape[size_t(*axis)];
  }
  c.setOutput(0, (*first)->dtype, out);
  return llvm::Error::success();
}

// Equal chunks of ceil(dim / n), the last one smaller (opset 18's num_outputs).
llvm::Expected<std::vector<int64_t>> equalSplit(InferContext &c, int64_t dim, int64_t n) {
  if (n <= 0) return c.error("cannot split into " + llvm::Twine(n) + " parts");
  int64_t chunk = (dim + n - 1) / n, last = dim - chunk * (n - 1);
  if (last < 0)
    return c.error("cannot split a dim of " + llvm::Twine(dim) + " into " + llvm::Twine(n) + " parts of " +
                   llvm::Twine(chunk));
  std::vector<int64_t> sizes(size_t(n), chunk);
  sizes.back() = last;
  return sizes;
}

llvm::Error inferSplit(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  auto axis = normalizeAxis(c, c.attrs().getInt("axis", 0), rankOf(**in));
  if (!axis) return axis.takeError();
  int64_t dim = (*in)->shape[size_t(*axis)], n = int64_t(c.numOutputs());
  std::vector<int64_t> sizes;
  if (c.hasInput(1)) {
    auto split = constInts(c, 1, "split");
    if (!split) return split.takeError();
    sizes = *split;
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s < 0) return c.error("split " + shapeToString(sizes) + " has a negative size");
      sum += s;
    }
    if (int64_t(sizes.size()) != n)
      return c.error("split " + shapeToString(sizes) + " has " + llvm::Twine(sizes.size()) + " sizes for " +
                     llvm::Twine(n) + " outputs");
    if (sum != dim)
      return c.error("split " + shapeToString(sizes) + " sums to " + llvm::Twine(sum) + ", but axis " +
                     llvm::Twine(*axis) + " has size " + llvm::Twine(dim));
  } else {
    if (c.attrs().has("num_outputs") && c.attrs().getInt("num_outputs", 0) != n)
      return c.error("num_outputs is " + llvm::Twine(c.attrs().getInt("num_outputs", 0)) + " but the node has " +
                     llvm::Twine(n) + " outputs");
    auto eq = equalSplit(c, dim, n);
    if (!eq) return eq.takeError();
    sizes = *eq;
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    Shape s = (*in)->shape;
    s[size_t(*axis)] = sizes[k];
    c.setOutput(k, (*in)->dtype, s);
  }
  return llvm::Error::success();
}

llvm::Error inferSlice(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  auto starts = constInts(c, 1, "starts");
  if (!starts) return starts.takeError();
  auto ends = constInts(c, 2, "ends");
  if (!ends) return ends.takeError();
  auto axes = optionalConstInts(c, 3, "axes");
  if (!axes) return axes.takeError();
  auto steps = optionalConstInts(c, 4, "steps");
  if (!steps) return steps.takeError();
  auto dims = cpu::resolveSlice((*in)->shape, *starts, *ends, *axes, *steps);
  if (!dims) return wrap(c, dims.takeError());
  Shape out;
  for (const cpu::SliceDim &d : *dims) out.push_back(d.count);
  c.setOutput(0, (*in)->dtype, out);
  return llvm::Error::success();
}

// ---- Gathers and scatters ----

llvm::Error inferGather(InferContext &c) {
  auto data = tensorInput(c, 0);
  if (!data) return data.takeError();
  auto indices = tensorInput(c, 1);
  if (!indices) return indices.takeError();
  if (auto e = requireIntegerInput(c, 1, "indices")) return e;
  int64_t rank = rankOf(**data);
  if (rank == 0) return c.error("data must have rank >= 1");
  auto axis = normalizeAxis(c, c.attrs().getInt("axis", 0), rank);
  if (!axis) return axis.takeError();
  const Shape &ds = (*data)->shape;
  Shape out(ds.begin(), ds.begin() + *axis);
  out.insert(out.end(), (*indices)->shape.begin(), (*indices)->shape.end());
  out.insert(out.end(), ds.begin() + *axis + 1, ds.end());
  c.setOutput(0, (*data)->dtype, out);
  return llvm::Error::success();
}

llvm::Error inferGatherElements(InferContext &c) {
  auto data = tensorInput(c, 0);
  if (!data) return data.takeError();
  auto indices = tensorInput(c, 1);
  if (!indices) return indices.takeError();
  if (auto e = requireIntegerInput(c, 1, "indices")) return e;
  int64_t rank = rankOf(**data);
  if (rank == 0 || rankOf(**indices) != rank)
    return c.error("data " + shapeToString((*data)->shape) + " and indices " + shapeToString((*indices)->shape) +
                   " must have the same rank >= 1");
  auto axis = normalizeAxis(c, c.attrs().getInt("axis", 0), rank);
  if (!axis) return axis.takeError();
  c.setOutput(0, (*data)->dtype, (*indices)->shape);
  return llvm::Error::success();
}

llvm::Error inferGatherND(InferContext &c) {
  auto data = tensorInput(c, 0);
  if (!data) return data.takeError();
  auto indices = tensorInput(c, 1);
  if (!indices) return indices.takeError();
  if (auto e = requireIntegerInput(c, 1, "indices")) return e;
  const Shape &ds = (*data)->shape, &is = (*indices)->shape;
  int64_t r = int64_t(ds.size()), q = int64_t(is.size()), b = c.attrs().getInt("batch_dims", 0);
  if (r < 1 || q < 1) return c.error("data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(r, q))
    return c.error("batch_dims " + llvm::Twine(b) + " must be less than both ranks (" + llvm::Twine(r) + ", " +
                   llvm::Twine(q) + ")");
  for (int64_t d = 0; d < b; ++d)
    if (ds[size_t(d)] != is[size_t(d)])
      return c.error("batch dims of data " + shapeToString(ds) + " and indices " + shapeToString(is) + " differ");
  int64_t k = is.back();
  if (k < 1 || k > r - b)
    return c.error("indices' last dim is " + llvm::Twine(k) + "; it must be in [1, " + llvm::Twine(r - b) + "]");
  Shape out(is.begin(), is.end() - 1);
  out.insert(out.end(), ds.begin() + b + k, ds.end());
  c.setOutput(0, (*data)->dtype, out);
  return llvm::Error::success();
}

llvm::Error checkReduction(InferContext &c) {
  std::string r = c.attrs().getString("reduction", "none");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min")
    return c.error("unknown reduction '" + r + "'");
  return llvm::Error::success();
}

llvm::Error inferScatterND(InferContext &c) {
  auto data = tensorInput(c, 0);
  if (!data) return data.takeError();
  auto indices = tensorInput(c, 1);
  if (!indices) return indices.takeError();
  auto updates = tensorInput(c, 2);
  if (!updates) return updates.takeError();
  if (auto e = requireIntegerInput(c, 1, "indices")) return e;
  if (auto e = checkReduction(c)) return e;
  const Shape &ds = (*data)->shape, &is = (*indices)->shape;
  if (is.empty()) return c.error("indices must have rank >= 1");
  int64_t k = is.back();
  if (k < 0 || k > int64_t(ds.size()))
    return c.error("indices' last dim " + llvm::Twine(k) + " exceeds the data rank " + llvm::Twine(ds.size()));
  Shape want(is.begin(), is.end() - 1);
  want.insert(want.end(), ds.begin() + k, ds.end());
  if ((*updates)->shape != want || (*updates)->dtype != (*data)->dtype)
    return c.error("updates is " + (*updates)->str() + " but must be " + TensorType{(*data)->dtype, want, false}.str());
  c.setOutput(0, (*data)->dtype, ds);
  return llvm::Error::success();
}

llvm::Error inferScatterElements(InferContext &c) {
  auto data = tensorInput(c, 0);
  if (!data) return data.takeError();
  auto indices = tensorInput(c, 1);
  if (!indices) return indices.takeError();
  auto updates = tensorInput(c, 2);
  if (!updates) return updates.takeError();
  if (auto e = requireIntegerInput(c, 1, "indices")) return e;
  if (auto e = checkReduction(c)) return e;
  int64_t rank = rankOf(**data);
  if (rank == 0 || rankOf(**indices) != rank || (*updates)->shape != (*indices)->shape ||
      (*updates)->dtype != (*data)->dtype)
    return c.error("indices " + shapeToString((*indices)->shape) + " and updates " + (*updates)->str() +
                   " must have one shape, of the rank of data " + (*data)->str());
  auto axis = normalizeAxis(c, c.attrs().getInt("axis", 0), rank);
  if (!axis) return axis.takeError();
  c.setOutput(0, (*data)->dtype, (*data)->shape);
  return llvm::Error::success();
}

llvm::Error inferOneHot(InferContext &c) {
  auto indices = tensorInput(c, 0);
  if (!indices) return indices.takeError();
  auto values = tensorInput(c, 2);
  if (!values) return values.takeError();
  auto depthT = c.requireConst(1, "depth");
  if (!depthT) return depthT.takeError();
  if ((*depthT)->numel() != 1) return c.error("depth must have one element");
  int64_t depth = int64_t((*depthT)->getAsDouble(0));
  if (depth <= 0) return c.error("depth must be positive, got " + llvm::Twine(depth));
  if (numElements((*values)->shape) != 2) return c.error("values must hold two elements [off, on]");
  int64_t r = rankOf(**indices);
  auto axis = normalizeAxis(c, c.attrs().getInt("axis", -1), r + 1);
  if (!axis) return axis.takeError();
  Shape out = (*indices)->shape;
  out.insert(out.begin() + *axis, depth);
  c.setOutput(0, (*values)->dtype, out);
  return llvm::Error::success();
}

// ---- Broadcast and repeat ----

llvm::Error inferExpand(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  auto shape = constInts(c, 1, "shape");
  if (!shape) return shape.takeError();
  for (int64_t d : *shape)
    if (d < 0) return c.error("shape " + shapeToString(*shape) + " has a negative dim");
  auto out = broadcastShapes(c, (*in)->shape, *shape);
  if (!out) return out.takeError();
  c.setOutput(0, (*in)->dtype, *out);
  return llvm::Error::success();
}

llvm::Error inferTile(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  auto repeats = constInts(c, 1, "repeats");
  if (!repeats) return repeats.takeError();
  const Shape &s = (*in)->shape;
  if (repeats->size() != s.size())
    return c.error("repeats has " + llvm::Twine(repeats->size()) + " entries for an input of rank " +
                   llvm::Twine(s.size()));
  Shape out;
  for (size_t d = 0; d < s.size(); ++d) {
    if ((*repeats)[d] < 0) return c.error("repeats " + shapeToString(*repeats) + " has a negative entry");
    out.push_back(s[d] * (*repeats)[d]);
  }
  c.setOutput(0, (*in)->dtype, out);
  return llvm::Error::success();
}

llvm::Error inferPad(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  std::string mode = c.attrs().getString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    return c.error("unknown mode '" + mode + "'");
  auto pads = constInts(c, 1, "pads");
  if (!pads) return pads.takeError();
  auto axes = optionalConstInts(c, 3, "axes");
  if (!axes) return axes.takeError();
  if (const TensorType *v = c.inputType(2); v && numElements(v->shape) != 1)
    return c.error("constant_value must be a scalar");
  const Shape &s = (*in)->shape;
  int64_t rank = int64_t(s.size());
  auto full = cpu::resolvePads(rank, *pads, *axes);
  if (!full) return wrap(c, full.takeError());
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t b = (*full)[size_t(d)], e = (*full)[size_t(d + rank)], dim = s[size_t(d)] + b + e;
    if (dim < 0)
      return c.error("pads " + shapeToString(*pads) + " crop axis " + llvm::Twine(d) + " of " + shapeToString(s) +
                     " below zero");
    if (mode != "constant" && s[size_t(d)] == 0 && dim > 0)
      return c.error("cannot " + mode + "-pad axis " + llvm::Twine(d) + ", which is empty");
    out.push_back(dim);
  }
  c.setOutput(0, (*in)->dtype, out);
  return llvm::Error::success();
}

// ---- Generators ----

llvm::Error inferRange(InferContext &c) {
  const Tensor *v[3];
  const char *names[3] = {"start", "limit", "delta"};
  for (size_t i = 0; i < 3; ++i) {
    auto t = c.requireConst(i, names[i]);
    if (!t) return t.takeError();
    v[i] = *t;
  }
  DType dt = v[0]->dtype();
  if (v[1]->dtype() != dt || v[2]->dtype() != dt)
    return c.error("start, limit and delta must share one dtype");
  if (!isFloatType(dt) && !isIntegerType(dt)) return c.error("unsupported dtype " + llvm::Twine(dtypeName(dt)));
  auto n = cpu::rangeCount(*v[0], *v[1], *v[2]);
  if (!n) return wrap(c, n.takeError());
  c.setOutput(0, dt, {*n});
  return llvm::Error::success();
}

llvm::Error inferConstantOfShape(InferContext &c) {
  auto shape = constInts(c, 0, "shape");
  if (!shape) return shape.takeError();
  for (int64_t d : *shape)
    if (d < 0) return c.error("shape " + shapeToString(*shape) + " has a negative dim");
  DType dt = DType::F32;
  if (const Attr *a = c.attrs().get("value")) {
    if (a->kind != Attr::Kind::Tensor || a->t.numel() != 1) return c.error("value must be a one-element tensor");
    dt = a->t.dtype();
  }
  c.setOutput(0, dt, *shape);
  return llvm::Error::success();
}

llvm::Error inferCumSum(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  if (auto e = requireIntegerInput(c, 1, "axis")) return e;
  if (const Tensor *axis = c.inputConst(1)) {
    if (axis->numel() != 1) return c.error("axis must be a scalar");
    auto a = normalizeAxis(c, axis->getAsInt(0), rankOf(**in));
    if (!a) return a.takeError();
  }
  c.setOutput(0, **in);
  return llvm::Error::success();
}

llvm::Error inferTrilu(InferContext &c) {
  auto in = tensorInput(c, 0);
  if (!in) return in.takeError();
  if (rankOf(**in) < 2) return c.error("input must have rank >= 2, got " + shapeToString((*in)->shape));
  if (const TensorType *k = c.inputType(1); k && numElements(k->shape) != 1) return c.error("k must be a scalar");
  c.setOutput(0, **in);
  return llvm::Error::success();
}

// ---- Sequences (SplitToSequence -> SequenceAt; lowered by lower-sequences) ----

llvm::Error inferSplitToSequence(InferContext &c) {
  auto desc = describeSplitToSequence(c.graph(), c.op());
  if (!desc) return desc.takeError();
  c.setOutput(0, TensorType{desc->dtype, {}, true});
  return llvm::Error::success();
}

// The SplitToSequence op that produced sequence input 0.
llvm::Expected<const Op *> sequenceProducer(InferContext &c) {
  const TensorType *t = c.inputType(0);
  if (!t || !t->isSequence) return c.error("input 0 must be a sequence");
  const Value &v = c.graph().value(c.op().inputs[0]);
  if (v.producer < 0 || c.graph().ops[size_t(v.producer)].type != "SplitToSequence")
    return c.error("sequence '" + v.name +
                   "' is not made by SplitToSequence; megac supports sequences only as SplitToSequence "
                   "followed by SequenceAt");
  return &c.graph().ops[size_t(v.producer)];
}

llvm::Error inferSequenceAt(InferContext &c) {
  auto producer = sequenceProducer(c);
  if (!producer) return producer.takeError();
  auto desc = describeSplitToSequence(c.graph(), **producer);
  if (!desc) return desc.takeError();
  auto pos = constInts(c, 1, "position");
  if (!pos) return pos.takeError();
  if (pos->size() != 1) return c.error("position must be a scalar");
  int64_t n = int64_t(desc->sizes.size()), p = pos->front();
  if (p < -n || p >= n)
    return c.error("position " + llvm::Twine(p) + " is out of range for a sequence of " + llvm::Twine(n) +
                   " elements");
  c.setOutput(0, desc->dtype, desc->elementShape(size_t(p < 0 ? p + n : p)));
  return llvm::Error::success();
}

llvm::Error inferSequenceLength(InferContext &c) {
  auto producer = sequenceProducer(c);
  if (!producer) return producer.takeError();
  auto desc = describeSplitToSequence(c.graph(), **producer);
  if (!desc) return desc.takeError();
  c.setOutputValue(0, Tensor::fromVector<int64_t>(DType::I64, {}, {int64_t(desc->sizes.size())}));
  return llvm::Error::success();
}

void add(const char *type, int minIn, int maxIn, InferFn fn, int minOut = 1, int maxOut = 1, bool foldable = true) {
  registerOpSchema(OpSchema{type, minIn, maxIn, minOut, maxOut, fn, foldable});
}

} // namespace

Shape SequenceSplit::elementShape(size_t k) const {
  Shape s = inputShape;
  if (squeeze) s.erase(s.begin() + axis);
  else s[size_t(axis)] = sizes[k];
  return s;
}

llvm::Expected<SequenceSplit> describeSplitToSequence(Graph &g, const Op &op) {
  if (op.inputs.empty() || op.inputs[0] == kNoValue) return opError(g, op, "input 0 is required");
  const TensorType &in = g.type(op.inputs[0]);
  if (!in.known()) return opError(g, op, "input 0 has no type yet (run specialize first)");
  if (in.isSequence) return opError(g, op, "input 0 is a sequence; SplitToSequence takes a tensor");
  SequenceSplit d;
  d.dtype = in.dtype;
  d.inputShape = in.shape;
  int64_t rank = int64_t(in.shape.size()), axis = op.attrs.getInt("axis", 0);
  if (axis < -rank || axis >= rank)
    return opError(g, op, "axis " + llvm::Twine(axis) + " is out of range for rank " + llvm::Twine(rank));
  d.axis = axis < 0 ? axis + rank : axis;
  int64_t dim = in.shape[size_t(d.axis)];
  if (op.inputs.size() < 2 || op.inputs[1] == kNoValue) {
    d.sizes.assign(size_t(dim), 1);
    d.squeeze = op.attrs.getInt("keepdims", 1) == 0;
    return d;
  }
  const Tensor *split = g.constValue(op.inputs[1]);
  if (!split)
    return opError(g, op, "split ('" + g.value(op.inputs[1]).name +
                              "') must be known at compile time, but it depends on run-time data");
  if (!isIntegerType(split->dtype())) return opError(g, op, "split must be an integer tensor");
  if (split->rank() == 0) {
    int64_t chunk = split->getAsInt(0);
    if (chunk <= 0) return opError(g, op, "split size " + llvm::Twine(chunk) + " must be positive");
    for (int64_t done = 0; done < dim; done += chunk) d.sizes.push_back(std::min(chunk, dim - done));
    return d;
  }
  if (split->rank() != 1) return opError(g, op, "split must be a scalar or a 1-D tensor");
  d.sizes = split->toInt64Vector();
  int64_t sum = 0;
  for (int64_t s : d.sizes) {
    if (s < 0) return opError(g, op, "split " + shapeToString(d.sizes) + " has a negative size");
    sum += s;
  }
  if (sum != dim)
    return opError(g, op, "split " + shapeToString(d.sizes) + " sums to " + llvm::Twine(sum) + ", but axis " +
                              llvm::Twine(d.axis) + " has size " + llvm::Twine(dim));
  return d;
}

void registerShapeSchemas() {
  add("Shape", 1, 1, inferShape);
  add("Size", 1, 1, inferSize);
  add("Reshape", 2, 2, inferReshape);
  add("Transpose", 1, 1, inferTranspose);
  add("Squeeze", 1, 2, inferSqueeze);
  add("Unsqueeze", 2, 2, inferUnsqueeze);
  add("Flatten", 1, 1, inferFlatten);
  add("Concat", 1, -1, inferConcat);
  add("Split", 1, 2, inferSplit, 1, -1);
  add("Slice", 3, 5, inferSlice);
  add("Gather", 2, 2, inferGather);
  add("GatherElements", 2, 2, inferGatherElements);
  add("GatherND", 2, 2, inferGatherND);
  add("ScatterND", 3, 3, inferScatterND);
  add("ScatterElements", 3, 3, inferScatterElements);
  add("Scatter", 3, 3, inferScatterElements); // opset 9-10; the import hook renames it
  add("OneHot", 3, 3, inferOneHot);
  add("Expand", 2, 2, inferExpand);
  add("Tile", 2, 2, inferTile);
  add("Pad", 2, 4, inferPad);
  add("Range", 3, 3, inferRange);
  add("ConstantOfShape", 1, 1, inferConstantOfShape);
  add("CumSum", 2, 2, inferCumSum);
  add("Trilu", 1, 2, inferTrilu);
  add("SplitToSequence", 1, 2, inferSplitToSequence, 1, 1, /*foldable=*/false);
  add("SequenceAt", 2, 2, inferSequenceAt, 1, 1, /*foldable=*/false);
  add("SequenceLength", 1, 1, inferSequenceLength, 1, 1, /*foldable=*/false);
}

} // namespace megac::ir
