#include "runtime/core/TensorFile.h"

#include "runtime/core/CheckedSize.h"
#include "runtime/core/ContainedPath.h"

#include "onnx.pb.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <climits>

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>

namespace megac {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

bool parseWholeMessage(llvm::StringRef bytes, google::protobuf::MessageLite &m) {
  google::protobuf::io::ArrayInputStream ais(bytes.data(), int(bytes.size()));
  google::protobuf::io::CodedInputStream cis(&ais);
  cis.SetTotalBytesLimit(INT_MAX);
  return m.ParseFromCodedStream(&cis) && cis.ConsumedEntireMessage();
}

bool hasExternalData(const onnx::TensorProto &p) {
  return p.has_data_location() && p.data_location() == onnx::TensorProto::EXTERNAL;
}

llvm::Expected<ExternalLocation> externalLocation(const onnx::TensorProto &p, const std::string &what) {
  ExternalLocation ex;
  for (const auto &kv : p.external_data()) {
    if (kv.key() == "location") ex.location = kv.value();
    else if (kv.key() == "offset" || kv.key() == "length") {
      char *end = nullptr;
      long long v = std::strtoll(kv.value().c_str(), &end, 10);
      if (!end || *end || v < 0) return err("tensor '" + what + "': bad external data " + kv.key() + " '" + kv.value() + "'");
      (kv.key() == "offset" ? ex.offset : ex.length) = v;
    }
  }
  if (ex.location.empty()) return err("tensor '" + what + "': external data has no location");
  if (ex.location.find("..") != std::string::npos || (!ex.location.empty() && ex.location[0] == '/'))
    return err("tensor '" + what + "': external data location '" + ex.location + "' leaves the model's directory");
  return ex;
}

template <class T, class Src> static void copyFrom(Tensor &t, const Src &src) {
  T *d = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = static_cast<T>(src.Get(int(i)));
}

llvm::Expected<Tensor> tensorFromProto(const onnx::TensorProto &p, const std::string &what) {
  DType dt = DType(p.data_type());
  if (dtypeSize(dt) == 0)
    return err("tensor '" + what + "': unsupported element type " + llvm::Twine(p.data_type()));
  Shape shape(p.dims().begin(), p.dims().end());
  for (int64_t d : shape)
    if (d < 0) return err("tensor '" + what + "': negative dimension");
  if (p.has_segment()) return err("tensor '" + what + "': segmented tensors are not supported");
  // The sizes come from the file: compared with the bytes present before anything is allocated.
  auto nbytes = checkedNbytes(shape, int64_t(dtypeSize(dt)));
  if (!nbytes)
    return err("tensor '" + what + "': shape " + shapeToString(shape) + " of " + dtypeName(dt) +
               " has more than 2^63 bytes");
  const int64_t n = *nbytes / int64_t(dtypeSize(dt));
  if (p.has_raw_data()) {
    if (p.raw_data().size() != uint64_t(*nbytes))
      return err("tensor '" + what + "': raw_data has " + llvm::Twine(p.raw_data().size()) + " bytes, shape " +
                 shapeToString(shape) + " of " + dtypeName(dt) + " needs " + llvm::Twine(*nbytes));
    Tensor t(dt, shape);
    std::memcpy(t.raw(), p.raw_data().data(), t.nbytes());
    return t;
  }
  const int have = dt == DType::F32                         ? p.float_data_size()
                   : dt == DType::F64                       ? p.double_data_size()
                   : dt == DType::I64                       ? p.int64_data_size()
                   : dt == DType::U32 || dt == DType::U64   ? p.uint64_data_size()
                                                            : p.int32_data_size();
  if (have != n)
    return err("tensor '" + what + "': has " + llvm::Twine(have) + " values, shape " + shapeToString(shape) +
               " needs " + llvm::Twine(n));
  Tensor t(dt, shape);
  switch (dt) {
  case DType::F32:
    copyFrom<float>(t, p.float_data());
    break;
  case DType::F64:
    copyFrom<double>(t, p.double_data());
    break;
  case DType::I64:
    copyFrom<int64_t>(t, p.int64_data());
    break;
  case DType::U32: case DType::U64:
    if (dt == DType::U32) copyFrom<uint32_t>(t, p.uint64_data());
    else copyFrom<uint64_t>(t, p.uint64_data());
    break;
  case DType::I32: case DType::I16: case DType::I8: case DType::U8: case DType::U16: case DType::Bool:
  case DType::F16: case DType::BF16: {
    for (int64_t i = 0; i < n; ++i) {
      int32_t v = p.int32_data(int(i));
      switch (dt) {
      case DType::I32: t.data<int32_t>()[i] = v; break;
      case DType::I16: t.data<int16_t>()[i] = int16_t(v); break;
      case DType::I8: t.data<int8_t>()[i] = int8_t(v); break;
      case DType::U8: case DType::Bool: t.data<uint8_t>()[i] = uint8_t(v); break;
      default: t.data<uint16_t>()[i] = uint16_t(v); break;
      }
    }
    break;
  }
  default:
    return err("tensor '" + what + "': element type " + dtypeName(dt) + " is not supported");
  }
  return t;
}

void tensorToProto(const Tensor &t, const std::string &name, onnx::TensorProto &p) {
  p.Clear();
  if (!name.empty()) p.set_name(name);
  p.set_data_type(int32_t(t.dtype()));
  for (int64_t d : t.shape()) p.add_dims(d);
  p.set_raw_data(std::string(static_cast<const char *>(t.raw()), t.nbytes()));
}

llvm::Expected<Tensor> readTensorFile(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buf) return err(path + ": " + buf.getError().message());
  onnx::TensorProto p;
  if (!p.ParseFromArray((*buf)->getBufferStart(), int((*buf)->getBufferSize())))
    return err(path + ": not a serialized ONNX TensorProto");
  auto t = tensorFromProto(p, p.name().empty() ? path : p.name());
  if (!t) return err(path + ": " + llvm::toString(t.takeError()));
  return t;
}

llvm::Error readExternal(const std::string &baseDir, const ExternalLocation &loc, const std::string &what,
                         void *dst, int64_t bytes) {
  llvm::SmallString<256> path(baseDir);
  llvm::sys::path::append(path, loc.location);
  if (auto e = checkInsideDirectory(baseDir, std::string(path), "external data of '" + what + "'")) return e;
  std::ifstream in(std::string(path), std::ios::binary);
  if (!in) return err("cannot open external data file '" + std::string(path) + "' for '" + what + "'");
  in.seekg(0, std::ios::end);
  int64_t fileSize = int64_t(in.tellg());
  if (loc.length >= 0 && loc.length != bytes)
    return err("external data for '" + what + "' has length " + llvm::Twine(loc.length) + " but its shape needs " +
               llvm::Twine(bytes) + " bytes");
  if (loc.offset < 0 || bytes < 0 || loc.offset > fileSize || bytes > fileSize - loc.offset)
    return err("external data for '" + what + "' runs past the end of '" + std::string(path) + "' (offset " +
               llvm::Twine(loc.offset) + ", " + llvm::Twine(bytes) + " bytes, file has " + llvm::Twine(fileSize) + ")");
  in.seekg(loc.offset);
  in.read(static_cast<char *>(dst), bytes);
  if (!in) return err("short read of external data for '" + what + "' from '" + std::string(path) + "'");
  return llvm::Error::success();
}

llvm::Error writeFileAtomically(const std::string &path, llvm::StringRef bytes) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return err(tmp + ": " + std::strerror(errno));
  const char *p = bytes.data();
  size_t left = bytes.size();
  while (left) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string m = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return err(tmp + ": write failed: " + m);
    }
    p += n;
    left -= size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return err(tmp + ": fsync/close failed: " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string m = std::strerror(errno);
    ::unlink(tmp.c_str());
    return err(path + ": rename failed: " + m);
  }
  return llvm::Error::success();
}

llvm::Error writeTensorFile(const std::string &path, const Tensor &t, const std::string &name) {
  onnx::TensorProto p;
  tensorToProto(t, name, p);
  std::string bytes;
  p.SerializeToString(&bytes);
  return writeFileAtomically(path, bytes);
}
} // namespace megac
