#include "frontend/OnnxExport.h"

#include "runtime/core/TensorFile.h"

#include "onnx.pb.h"


#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <climits>
#include <map>
#include <set>

namespace megac::frontend {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static std::string shapeText(const Shape &s) { return shapeToString(s); }

static llvm::Error parseModel(const std::string &path, onnx::ModelProto &model) {
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return err(path + ": cannot read the model: " + buf.getError().message());
  if (!parseWholeMessage((*buf)->getBuffer(), model) || !model.has_graph())
    return err(path + ": not a valid ONNX model");
  return llvm::Error::success();
}

// Elements of a tensor with these dims, or -1 when a dim is negative.
static int64_t elementCount(const google::protobuf::RepeatedField<int64_t> &dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

static void setTensorData(onnx::TensorProto &p, const std::string &name, const Tensor &t) {
  std::string doc = p.doc_string();
  tensorToProto(t, name, p);
  if (!doc.empty()) p.set_doc_string(doc);
}

// Replaces external data of an initializer by its bytes (raw_data).
static llvm::Error internalize(onnx::TensorProto &p, const std::string &modelPath, const std::string &baseDir) {
  auto loc = externalLocation(p, p.name());
  if (!loc) return err(modelPath + ": " + llvm::toString(loc.takeError()));
  size_t elemSize = dtypeSize(DType(p.data_type()));
  int64_t n = elementCount(p.dims());
  if (elemSize == 0 || n < 0)
    return err(modelPath + ": initializer '" + p.name() + "' has external data of an unsupported type or shape");
  std::string bytes(size_t(n) * elemSize, '\0');
  if (auto e = readExternal(baseDir, *loc, p.name(), bytes.data(), int64_t(bytes.size())))
    return err(modelPath + ": " + llvm::toString(std::move(e)));
  p.clear_external_data();
  p.clear_data_location();
  p.set_raw_data(std::move(bytes));
  return llvm::Error::success();
}

// Bytes of an initializer's data as stored (inline).
static int64_t storedBytes(const onnx::TensorProto &p) {
  if (p.has_raw_data()) return int64_t(p.raw_data().size());
  size_t elemSize = dtypeSize(DType(p.data_type()));
  int64_t n = elementCount(p.dims());
  if (elemSize && n >= 0) return n * int64_t(elemSize);
  int64_t s = 0;
  for (const auto &str : p.string_data()) s += int64_t(str.size());
  return s;
}

static llvm::Error checkShape(const std::string &modelPath, const std::string &name, const Shape &model,
                              const Shape &trained) {
  if (model != trained)
    return err(modelPath + ": parameter '" + name + "' has shape " + shapeText(model) + " in the model but " +
               shapeText(trained) + " in the checkpoint");
  return llvm::Error::success();
}

// Moves initializers of at least opts.externalMinBytes into one data blob.
static llvm::Expected<std::string> moveToExternal(onnx::GraphProto &g, const std::string &location,
                                                  const OnnxExportOptions &opts, int &count) {
  std::string blob;
  for (auto &p : *g.mutable_initializer()) {
    DType dt = DType(p.data_type());
    if (dt == DType::String || dtypeSize(dt) == 0 || storedBytes(p) < opts.externalMinBytes) continue;
    if (!p.has_raw_data()) {
      auto t = tensorFromProto(p, p.name());
      if (!t) return t.takeError();
      setTensorData(p, p.name(), *t); // tensorToProto writes raw_data
    }
    int64_t align = std::max<int64_t>(opts.externalAlignment, 1);
    blob.append((align - int64_t(blob.size()) % align) % align, '\0');
    int64_t offset = int64_t(blob.size()), length = int64_t(p.raw_data().size());
    blob.append(p.raw_data());
    p.clear_raw_data();
    p.set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const char *k, const std::string &v) {
      auto *kv = p.add_external_data();
      kv->set_key(k);
      kv->set_value(v);
    };
    add("location", location);
    add("offset", std::to_string(offset));
    add("length", std::to_string(length));
    ++count;
  }
  return blob;
}

llvm::Expected<OnnxExportResult> exportOnnxWithWeights(const std::string &modelPath,
                                                       const std::vector<NamedTensor> &weights,
                                                       const std::string &outPath, const OnnxExportOptions &opts) {
  onnx::ModelProto model;
  if (auto e = parseModel(modelPath, model)) return std::move(e);
  std::string baseDir = std::string(llvm::sys::path::parent_path(modelPath));
  if (baseDir.empty()) baseDir = ".";
  onnx::GraphProto &g = *model.mutable_graph();

  std::map<std::string, int> initIndex, inputIndex;
  for (int i = 0; i < g.initializer_size(); ++i) initIndex[g.initializer(i).name()] = i;
  for (int i = 0; i < g.input_size(); ++i) inputIndex[g.input(i).name()] = i;

  OnnxExportResult result;
  std::set<std::string> trained, promoted;
  for (const NamedTensor &w : weights) {
    if (w.tensor.dtype() != DType::F32) return err("parameter '" + w.name + "': export expects float32 values");
    if (!trained.insert(w.name).second) return err("parameter '" + w.name + "' given twice");
    if (auto it = initIndex.find(w.name); it != initIndex.end()) {
      onnx::TensorProto &p = *g.mutable_initializer(it->second);
      if (DType(p.data_type()) != DType::F32)
        return err(modelPath + ": parameter '" + w.name + "' is " + dtypeName(DType(p.data_type())) +
                   " in the model, the checkpoint holds f32");
      if (auto e = checkShape(modelPath, w.name, Shape(p.dims().begin(), p.dims().end()), w.tensor.shape()))
        return std::move(e);
      setTensorData(p, w.name, w.tensor);
      ++result.replaced;
      continue;
    }
    auto in = inputIndex.find(w.name);
    if (in == inputIndex.end())
      return err(modelPath + ": parameter '" + w.name + "' is neither an initializer nor an input of the model");
    const onnx::ValueInfoProto &vi = g.input(in->second);
    if (!vi.type().has_tensor_type())
      return err(modelPath + ": parameter '" + w.name + "' is an input that is not a tensor");
    const auto &tt = vi.type().tensor_type();
    if (tt.elem_type() != int32_t(DType::F32) && tt.elem_type() != 0)
      return err(modelPath + ": parameter '" + w.name + "' is " + dtypeName(DType(tt.elem_type())) +
                 " in the model, the checkpoint holds f32");
    if (tt.has_shape()) {
      bool same = tt.shape().dim_size() == int(w.tensor.shape().size());
      for (int d = 0; same && d < tt.shape().dim_size(); ++d)
        if (tt.shape().dim(d).has_dim_value()) same = tt.shape().dim(d).dim_value() == w.tensor.shape()[d];
      if (!same) {
        Shape s;
        for (const auto &d : tt.shape().dim()) s.push_back(d.has_dim_value() ? d.dim_value() : -1);
        return err(modelPath + ": parameter '" + w.name + "' has shape " + shapeText(s) + " in the model but " +
                   shapeText(w.tensor.shape()) + " in the checkpoint");
      }
    }
    setTensorData(*g.add_initializer(), w.name, w.tensor);
    promoted.insert(w.name);
  }
  result.promotedInputs = int(promoted.size());
  // Before IR version 4 every initializer must also be a graph input.
  if (!promoted.empty() && model.ir_version() >= 4) {
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
    for (auto &vi : *g.mutable_input())
      if (!promoted.count(vi.name())) *kept.Add() = std::move(vi);
    g.mutable_input()->Swap(&kept);
  }

  for (auto &p : *g.mutable_initializer())
    if (hasExternalData(p))
      if (auto e = internalize(p, modelPath, baseDir)) return std::move(e);
  for (const auto &p : g.initializer()) result.initializerBytes += storedBytes(p);

  std::string blob;
  if (result.initializerBytes > opts.externalDataAbove) {
    result.dataPath = outPath + ".data";
    std::string location = std::string(llvm::sys::path::filename(outPath)) + ".data";
    auto b = moveToExternal(g, location, opts, result.externalTensors);
    if (!b) return b.takeError();
    blob = std::move(*b);
  }
  if (model.ByteSizeLong() >= size_t(INT_MAX))
    return err(outPath + ": the model would exceed protobuf's 2 GB limit even with its weights in external data");
  std::string bytes;
  if (!model.SerializeToString(&bytes)) return err(outPath + ": cannot serialize the model");
  if (!result.dataPath.empty())
    if (auto e = writeFileAtomically(result.dataPath, blob)) return std::move(e);
  if (auto e = writeFileAtomically(outPath, bytes)) return std::move(e);
  return result;
}

} // namespace megac::frontend
