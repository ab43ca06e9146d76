#include "frontend/OnnxImport.h"

#include "runtime/core/ModelHash.h"

#include "frontend/ImportHooks.h"
#include "frontend/TensorProto.h"
#include "runtime/core/CheckedSize.h"
#include "runtime/core/ContainedPath.h"
#include "ir/OpSchema.h"

#include "onnx.pb.h"


#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <set>

namespace megac::frontend {

using namespace megac::ir;

namespace {

constexpr int64_t kMaxIrVersion = 11;
// Tensors without data carry only a shape: one past 2^36 elements (a 256 GB
// fp32 weight; the largest models' largest weight is about 2^31) is a
// corrupt file, refused before any size derived from it is used. Run-time
// inputs get 2^40 (their shapes come from --batch/--seq too).
constexpr int kMaxDataLessElementsLog2 = 36;
constexpr int64_t kMaxDataLessElements = int64_t(1) << kMaxDataLessElementsLog2;
constexpr int kMaxInputElementsLog2 = 40;

llvm::Error fail(const std::string &path, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), (path + ": " + msg).str());
}

llvm::Expected<Attr> convertAttr(const onnx::AttributeProto &a, const std::string &what) {
  using AP = onnx::AttributeProto;
  switch (a.type()) {
  case AP::INT: return Attr::ofInt(a.i());
  case AP::FLOAT: return Attr::ofFloat(a.f());
  case AP::STRING: return Attr::ofString(a.s());
  case AP::INTS: return Attr::ofInts({a.ints().begin(), a.ints().end()});
  case AP::FLOATS: return Attr::ofFloats({a.floats().begin(), a.floats().end()});
  case AP::STRINGS: return Attr::ofStrings({a.strings().begin(), a.strings().end()});
  case AP::TENSOR: {
    if (hasExternalData(a.t()))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "attribute '" + a.name() + "' of " + what + " has external data, not supported");
    auto t = tensorFromProto(a.t(), a.name());
    if (!t) return t.takeError();
    return Attr::ofTensor(*t);
  }
  case AP::UNDEFINED:
    // Older exporters leave the type unset; infer from the populated field.
    if (a.has_i()) return Attr::ofInt(a.i());
    if (a.has_f()) return Attr::ofFloat(a.f());
    if (a.has_s()) return Attr::ofString(a.s());
    if (a.ints_size()) return Attr::ofInts({a.ints().begin(), a.ints().end()});
    if (a.floats_size()) return Attr::ofFloats({a.floats().begin(), a.floats().end()});
    [[fallthrough]];
  default:
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "attribute '" + a.name() + "' of " + what + " has a type megac does not support (" +
                                       AP::AttributeType_Name(a.type()) + ")");
  }
}

class Importer {
public:
  Importer(const std::string &path, const ImportOptions &opts, ImportStats *stats)
      : path_(path), opts_(opts), stats_(stats) {}

  llvm::Expected<std::unique_ptr<Graph>> run() {
    if (auto e = parse()) return std::move(e);
    g_ = std::make_unique<Graph>();
    g_->sourcePath = path_;
    g_->sourceModelHash = onnxModelHash(model_);
    g_->baseDir = std::string(llvm::sys::path::parent_path(path_));
    if (g_->baseDir.empty()) g_->baseDir = ".";
    if (auto e = readHeader()) return std::move(e);
    const onnx::GraphProto &gp = model_.graph();
    g_->name = gp.name().empty() ? "main" : gp.name();
    if (auto e = importInitializers(gp)) return std::move(e);
    if (auto e = importInputs(gp)) return std::move(e);
    for (const auto &n : gp.node())
      if (auto e = importNode(n)) return std::move(e);
    for (const auto &o : gp.output()) {
      ValueId id = g_->lookup(o.name());
      if (id == kNoValue) return fail(path_, "graph output '" + o.name() + "' is not produced by any node");
      g_->outputs.push_back(id);
    }
    if (g_->outputs.empty()) return fail(path_, "graph has no outputs");
    return std::move(g_);
  }

private:
  llvm::Error parse() {
    auto buf = llvm::MemoryBuffer::getFile(path_, false, false);
    if (!buf) return fail(path_, "cannot read: " + buf.getError().message());
    if (!parseWholeMessage((*buf)->getBuffer(), model_))
      return fail(path_, "not a valid ONNX model (the protobuf does not parse: truncated or corrupt file?)");
    if (!model_.has_graph()) return fail(path_, "not a valid ONNX model (no graph)");
    return llvm::Error::success();
  }

  llvm::Error readHeader() {
    if (model_.ir_version() <= 0) return fail(path_, "not a valid ONNX model (ir_version missing)");
    if (model_.ir_version() > kMaxIrVersion)
      return fail(path_, "ONNX IR version " + llvm::Twine(model_.ir_version()) + " is newer than megac supports (up to " +
                             llvm::Twine(kMaxIrVersion) + ")");
    if (stats_) {
      stats_->ir_version = model_.ir_version();
      stats_->producer = model_.producer_name() + " " + model_.producer_version();
    }
    for (const auto &os : model_.opset_import()) {
      if (os.domain().empty() || os.domain() == "ai.onnx") g_->opset = os.version();
      else domains_[os.domain()] = os.version();
    }
    if (g_->opset == 0) return fail(path_, "model imports no default-domain opset");
    if (g_->opset > 23)
      return fail(path_, "opset " + llvm::Twine(g_->opset) + " is newer than megac supports (up to 23)");
    for (const auto &f : model_.functions()) functions_.insert(f.domain() + ":" + f.name());
    return llvm::Error::success();
  }

  llvm::Error importInitializers(const onnx::GraphProto &gp) {
    for (const auto &ip : gp.initializer()) {
      Value v;
      v.name = ip.name();
      v.kind = ValueKind::Const; // classify-params decides which are parameters
      v.type.dtype = DType(ip.data_type());
      v.type.shape.assign(ip.dims().begin(), ip.dims().end());
      if (dtypeSize(v.type.dtype) == 0)
        return fail(path_, "initializer '" + ip.name() + "' has an unsupported element type " + llvm::Twine(ip.data_type()));
      if (hasExternalData(ip)) {
        auto ex = externalRef(ip, ip.name());
        if (!ex) return fail(path_, llvm::toString(ex.takeError()));
        llvm::SmallString<256> p(g_->baseDir);
        llvm::sys::path::append(p, ex->location);
        if (llvm::sys::fs::exists(p)) {
          if (auto e = checkExternal(ip.name(), v.type, *ex, std::string(p))) return e;
          v.external = *ex;
        } else {
          if (auto e = checkDataLessSize("initializer '" + ip.name() + "' (its external data file is missing)",
                                         v.type))
            return e;
          if (stats_) {
            stats_->dataLessWeights.push_back(ip.name());
            stats_->missingDataFiles.insert(std::string(p));
          }
        }
      } else {
        auto t = tensorFromProto(ip, ip.name());
        if (!t) return fail(path_, llvm::toString(t.takeError()));
        v.data = std::move(*t);
      }
      auto id = g_->addValue(std::move(v));
      if (!id) return id.takeError();
    }
    for (const auto &sp : gp.sparse_initializer())
      return fail(path_, "sparse initializer '" + sp.values().name() + "' is not supported");
    return llvm::Error::success();
  }

  // External data: inside the model's directory (resolved, links too), and
  // the bytes its shape needs present in the file, before anything is read.
  llvm::Error checkExternal(const std::string &name, const TensorType &type, const ExternalData &ex,
                            const std::string &file) {
    if (auto e = checkInsideDirectory(g_->baseDir.empty() ? "." : g_->baseDir, file,
                                      "external data of initializer '" + name + "'"))
      return fail(path_, llvm::toString(std::move(e)));
    auto nbytes = checkedNbytes(type.shape, int64_t(dtypeSize(type.dtype)));
    if (!nbytes)
      return fail(path_, "initializer '" + name + "' has shape " + shapeToString(type.shape) +
                             ", more than 2^63 bytes");
    uint64_t size = 0;
    if (auto ec = llvm::sys::fs::file_size(file, size)) return fail(path_, file + ": " + ec.message());
    if (ex.length >= 0 && ex.length != *nbytes)
      return fail(path_, "initializer '" + name + "': its external data length is " + llvm::Twine(ex.length) +
                             " bytes, its shape " + shapeToString(type.shape) + " needs " + llvm::Twine(*nbytes));
    if (uint64_t(ex.offset) > size || uint64_t(*nbytes) > size - uint64_t(ex.offset))
      return fail(path_, "initializer '" + name + "': " + llvm::Twine(*nbytes) + " bytes at offset " +
                             llvm::Twine(ex.offset) + " run past the end of " + file + " (" + llvm::Twine(size) +
                             " bytes): truncated?");
    return llvm::Error::success();
  }

  // A tensor without data (a weight exported shapes-only, a graph input):
  // its shape is all there is to check, against a bound no model reaches.
  llvm::Error checkDataLessSize(const std::string &what, const TensorType &type, bool runtimeInput = false) {
    const int log2 = runtimeInput ? kMaxInputElementsLog2 : kMaxDataLessElementsLog2;
    if (!checkedNumel(type.shape, int64_t(1) << log2))
      return fail(path_, what + " has shape " + shapeToString(type.shape) + ": more than 2^" + llvm::Twine(log2) +
                             " elements" + (runtimeInput ? " (check --batch, --seq and --dim)" : ", which no model has"));
    return llvm::Error::success();
  }

  llvm::Expected<Shape> bindShape(const onnx::ValueInfoProto &vi, bool firstRuntimeInput) {
    Shape s;
    if (!vi.type().tensor_type().has_shape())
      return fail(path_, "graph input '" + vi.name() + "' has no shape; megac needs static shapes");
    const auto &dims = vi.type().tensor_type().shape().dim();
    const Shape *given = nullptr;
    if (opts_.inputShapes.count(vi.name())) given = &opts_.inputShapes.at(vi.name());
    else if (firstRuntimeInput && opts_.firstInputShape) given = &*opts_.firstInputShape;
    if (given && given->size() != size_t(dims.size()))
      return fail(path_, "data for graph input '" + vi.name() + "' has rank " + llvm::Twine(given->size()) +
                             ", the model wants rank " + llvm::Twine(dims.size()));
    for (int i = 0; i < dims.size(); ++i) {
      const auto &d = dims[i];
      if (d.has_dim_param()) dimParams_.insert(d.dim_param());
      if (given && d.has_dim_value() && d.dim_value() != (*given)[size_t(i)])
        return fail(path_, "data for graph input '" + vi.name() + "' has shape " + shapeToString(*given) +
                               ", the model wants dim " + llvm::Twine(i) + " = " + llvm::Twine(d.dim_value()));
      if (given && !d.has_dim_value()) {
        std::string p = d.has_dim_param() ? d.dim_param() : "";
        if (!p.empty()) bound_[p] = (*given)[size_t(i)];
        s.push_back((*given)[size_t(i)]);
        continue;
      }
      if (d.has_dim_value()) {
        const int64_t asked = firstRuntimeInput && i == 0 ? opts_.batch : firstRuntimeInput && i == 1 ? opts_.seq : -1;
        if (!given && asked > 0 && d.dim_value() != asked)
          return fail(path_, "graph input '" + vi.name() + "' has a fixed dim " + llvm::Twine(i) + " of " +
                                 llvm::Twine(d.dim_value()) + ", but " + (i == 0 ? "--batch " : "--seq ") +
                                 llvm::Twine(asked) + " was given: export with dynamic batch and seq axes, or give " +
                                 (i == 0 ? "--batch " : "--seq ") + llvm::Twine(d.dim_value()));
        if (d.dim_value() < 0)
          return fail(path_, "graph input '" + vi.name() + "' has a negative dim " + llvm::Twine(i));
        s.push_back(d.dim_value());
        continue;
      }
      std::string p = d.has_dim_param() ? d.dim_param() : "";
      int64_t val = -1;
      if (!p.empty() && opts_.dims.count(p)) val = opts_.dims.at(p);
      else if (!p.empty() && bound_.count(p)) val = bound_.at(p);
      else if (firstRuntimeInput && i == 0 && opts_.batch > 0) val = opts_.batch;
      else if (firstRuntimeInput && i == 1 && opts_.seq > 0) val = opts_.seq;
      if (val <= 0)
        return fail(path_, "graph input '" + vi.name() + "' dim " + llvm::Twine(i) + " ('" + p +
                               "') is symbolic; give it a size with " +
                               (firstRuntimeInput && i < 2 ? (i == 0 ? "--batch" : "--seq") : ("--dim " + p + "=N")));
      if (!p.empty()) bound_[p] = val;
      s.push_back(val);
    }
    return s;
  }

  llvm::Error importInputs(const onnx::GraphProto &gp) {
    bool first = true;
    for (const auto &vi : gp.input()) {
      ValueId existing = g_->lookup(vi.name());
      if (existing != kNoValue) continue; // an initializer listed as input (old exporters)
      if (!vi.type().has_tensor_type())
        return fail(path_, "graph input '" + vi.name() + "' is not a tensor; megac supports tensor inputs only");
      DType dt = DType(vi.type().tensor_type().elem_type());
      if (dtypeSize(dt) == 0)
        return fail(path_, "graph input '" + vi.name() + "' has an unsupported element type");
      bool allStatic = vi.type().tensor_type().has_shape();
      if (allStatic)
        for (const auto &d : vi.type().tensor_type().shape().dim()) allStatic &= d.has_dim_value();
      // A float input with a fully static shape is a weight saved without
      // data (keep_initializers_as_inputs + include_initializers=False).
      bool dataLessWeight = isFloatType(dt) && allStatic && !first;
      if (isFloatType(dt) && allStatic && first && gp.input_size() > 1) dataLessWeight = true;
      if (opts_.inputShapes.count(vi.name())) dataLessWeight = false; // the caller feeds data for it
      Value v;
      v.name = vi.name();
      v.type.dtype = dt;
      auto s = bindShape(vi, first && !dataLessWeight);
      if (!s) return s.takeError();
      v.type.shape = *s;
      if (auto e = checkDataLessSize((dataLessWeight ? "weight '" : "graph input '") + vi.name() + "'", v.type,
                                     !dataLessWeight))
        return e;
      v.kind = dataLessWeight ? ValueKind::Const : ValueKind::Input;
      if (dataLessWeight && stats_) stats_->dataLessWeights.push_back(vi.name());
      if (!dataLessWeight) first = false;
      auto id = g_->addValue(std::move(v));
      if (!id) return id.takeError();
      if (!dataLessWeight) g_->inputs.push_back(*id);
    }
    if (g_->inputs.empty()) return fail(path_, "graph has no run-time inputs");
    for (const auto &[name, size] : opts_.dims)
      if (!dimParams_.count(name)) {
        std::string known;
        for (const std::string &p : dimParams_) known += (known.empty() ? "" : ", ") + p;
        return fail(path_, "--dim " + name + "=" + llvm::Twine(size) + ": the model's inputs have no dimension named '" +
                               name + "' (" + (known.empty() ? std::string("they have none") : "they have " + known) +
                               ")");
      }
    return llvm::Error::success();
  }

  llvm::Error importConstant(const onnx::NodeProto &n) {
    if (n.output_size() != 1) return nodeError(n, "Constant must have one output");
    if (n.attribute_size() != 1) return nodeError(n, "Constant must have exactly one value attribute");
    const auto &a = n.attribute(0);
    Tensor t;
    if (a.name() == "value") {
      if (hasExternalData(a.t())) return nodeError(n, "Constant with external data is not supported");
      auto r = tensorFromProto(a.t(), n.output(0));
      if (!r) return nodeError(n, llvm::toString(r.takeError()));
      t = *r;
    } else if (a.name() == "value_float") t = Tensor::scalar(a.f());
    else if (a.name() == "value_floats")
      t = Tensor::fromVector<float>(DType::F32, {a.floats_size()}, {a.floats().begin(), a.floats().end()});
    else if (a.name() == "value_int") t = Tensor::fromVector<int64_t>(DType::I64, {}, {a.i()});
    else if (a.name() == "value_ints")
      t = Tensor::fromVector<int64_t>(DType::I64, {a.ints_size()}, {a.ints().begin(), a.ints().end()});
    else return nodeError(n, "Constant attribute '" + a.name() + "' is not supported");
    Value v;
    v.name = n.output(0);
    v.kind = ValueKind::Const;
    v.type = {t.dtype(), t.shape(), false};
    v.data = t;
    auto id = g_->addValue(std::move(v));
    if (!id) return nodeError(n, llvm::toString(id.takeError()));
    return llvm::Error::success();
  }

  llvm::Error nodeError(const onnx::NodeProto &n, const llvm::Twine &msg) {
    Op op;
    op.type = n.domain().empty() || n.domain() == "ai.onnx" ? n.op_type() : n.domain() + "." + n.op_type();
    op.name = n.name();
    return opError(*g_, op, msg);
  }

  llvm::Error importNode(const onnx::NodeProto &n) {
    bool defaultDomain = n.domain().empty() || n.domain() == "ai.onnx";
    if (!defaultDomain) {
      if (functions_.count(n.domain() + ":" + n.op_type()))
        return nodeError(n, "model-local functions are not supported; export with inlined functions");
      return nodeError(n, "unsupported op (domain '" + n.domain() + "')");
    }
    if (n.op_type() == "Constant") return importConstant(n);
    const OpSchema *schema = lookupOpSchema(n.op_type());
    if (!schema) return nodeError(n, "unsupported op");
    NodeImport ni{*g_, g_->opset, n.op_type(), n.name(), {}, {}, {}};
    for (const auto &in : n.input()) {
      if (in.empty()) {
        ni.inputs.push_back(kNoValue);
        continue;
      }
      ValueId id = g_->lookup(in);
      if (id == kNoValue)
        return nodeError(n, "input '" + in + "' is not defined before this node (the graph is malformed or not sorted)");
      ni.inputs.push_back(id);
    }
    for (const auto &a : n.attribute()) {
      auto attr = convertAttr(a, "node '" + n.name() + "'");
      if (!attr) return nodeError(n, llvm::toString(attr.takeError()));
      ni.attrs.set(a.name(), std::move(*attr));
    }
    for (const auto &out : n.output()) {
      if (out.empty()) {
        ni.outputs.push_back(kNoValue);
        continue;
      }
      Value v;
      v.name = out;
      auto id = g_->addValue(std::move(v));
      if (!id) return nodeError(n, "output '" + out + "' is defined twice");
      ni.outputs.push_back(*id);
    }
    if (ImportHook hook = lookupImportHook(n.op_type()))
      if (auto e = hook(ni)) return e;
    schema = lookupOpSchema(ni.type);
    if (!schema) return nodeError(n, "unsupported op");
    int nin = int(ni.inputs.size()), nout = int(ni.outputs.size());
    if (nin < schema->minInputs || (schema->maxInputs >= 0 && nin > schema->maxInputs))
      return nodeError(n, "has " + llvm::Twine(nin) + " inputs; expected " + llvm::Twine(schema->minInputs) +
                              (schema->maxInputs < 0 ? " or more" : " to " + std::to_string(schema->maxInputs)));
    if (nout < schema->minOutputs || (schema->maxOutputs >= 0 && nout > schema->maxOutputs))
      return nodeError(n, "has " + llvm::Twine(nout) + " outputs; expected " + llvm::Twine(schema->minOutputs) +
                              (schema->maxOutputs < 0 ? " or more" : " to " + std::to_string(schema->maxOutputs)));
    Op op;
    op.type = ni.type;
    op.name = n.name().empty() ? (n.op_type() + "_" + std::to_string(g_->ops.size())) : n.name();
    op.inputs = std::move(ni.inputs);
    op.outputs = std::move(ni.outputs);
    op.attrs = std::move(ni.attrs);
    g_->addOp(std::move(op));
    return llvm::Error::success();
  }

  std::string path_;
  ImportOptions opts_;
  ImportStats *stats_;
  onnx::ModelProto model_;
  std::unique_ptr<Graph> g_;
  std::map<std::string, int64_t> domains_;
  std::set<std::string> functions_;
  std::map<std::string, int64_t> bound_;
  std::set<std::string> dimParams_; // symbolic dims the graph's inputs name
};

} // namespace

llvm::Expected<std::unique_ptr<Graph>> importOnnx(const std::string &path, const ImportOptions &opts,
                                                 ImportStats *stats) {
  return Importer(path, opts, stats).run();
}

} // namespace megac::frontend
