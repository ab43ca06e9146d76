#include "runtime/plan/PlanIO.h"

#include "runtime/core/LittleEndian.h"

#include "runtime/core/TensorFile.h"
#include "runtime/plan/PlanChecker.h"


#include "llvm/Support/CRC.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"

#include <cstdio>
#include <cstring>

namespace megac::plan {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

static constexpr char kMagic[8] = {'M', 'E', 'G', 'A', 'C', 'P', 'L', 'N'};
static constexpr size_t kHeaderBytes = 16; // version u32, CRC-32 u32, payload bytes u64
// A header is told from the headerless formats 1-3 by its first byte.
static_assert((kFormatVersion & 0xff) != 0x08, "a header's first byte must differ from a headerless plan's (0x08)");

static uint32_t crc32Of(llvm::StringRef s) {
  return llvm::crc32(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(s.data()), s.size()));
}

static constexpr const char *kRecompile = "recompile the model with megac compile";

// An absolute, normalized path ("a/./b/../c" -> "/cwd/a/c").
static std::string absolutePath(const std::string &path) {
  llvm::SmallString<256> p(path);
  llvm::sys::fs::make_absolute(p);
  llvm::sys::path::remove_dots(p, /*remove_dot_dot=*/true);
  return std::string(p);
}

// `to` relative to the directory `from` (both absolute): "../models/m.onnx".
static std::string relativePath(const std::string &to, const std::string &from) {
  llvm::SmallVector<llvm::StringRef, 16> a, b;
  for (auto it = llvm::sys::path::begin(to), e = llvm::sys::path::end(to); it != e; ++it) a.push_back(*it);
  for (auto it = llvm::sys::path::begin(from), e = llvm::sys::path::end(from); it != e; ++it) b.push_back(*it);
  size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
  llvm::SmallString<256> r;
  for (size_t i = common; i < b.size(); ++i) llvm::sys::path::append(r, "..");
  for (size_t i = common; i < a.size(); ++i) llvm::sys::path::append(r, a[i]);
  return r.empty() ? std::string(".") : std::string(r);
}

static std::string parentOf(const std::string &path) {
  return std::string(llvm::sys::path::parent_path(absolutePath(path)));
}

llvm::Error writePlan(const Plan &plan, const std::string &path) {
  Plan p = plan;
  p.set_format_version(kFormatVersion); // the relative model path is format 5's
  if (!p.model_path().empty()) p.set_model_path(relativePath(absolutePath(p.model_path()), parentOf(path)));
  std::string payload;
  if (!p.SerializeToString(&payload)) return err(path + ": cannot serialize the plan");
  std::string bytes(kMagic, sizeof kMagic);
  putLE(bytes, p.format_version(), 4);
  putLE(bytes, crc32Of(payload), 4);
  putLE(bytes, payload.size(), 8);
  bytes += payload;
  return writeFileAtomically(path, bytes);
}

static llvm::Error otherVersion(const std::string &path, uint32_t version, const std::string &megacVersion) {
  return err(path + ": plan format version " + llvm::Twine(version) + " (megac " + megacVersion +
             "); this megac reads version " + llvm::Twine(kFormatVersion) + ": " + kRecompile);
}

llvm::Expected<Plan> readPlan(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return err(path + ": cannot read: " + buf.getError().message());
  llvm::StringRef data = (*buf)->getBuffer();
  if (data.size() < sizeof kMagic || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0)
    return err(path + ": not a megac plan file");
  data = data.drop_front(sizeof kMagic);
  Plan p;
  // Formats 1-3: the Plan right after the magic; its first field is
  // format_version (key 0x08). A header starts with its version, 4 or more.
  if (!data.empty() && data[0] == 0x08) {
    if (!parseWholeMessage(data, p)) return err(path + ": the plan is truncated or corrupt");
    if (p.format_version() >= kFormatVersion)
      return err(path + ": the plan is truncated or corrupt (format version " + llvm::Twine(p.format_version()) +
                 " without its header); " + kRecompile);
    return otherVersion(path, p.format_version(), p.megac_version());
  }
  if (data.size() < kHeaderBytes) return err(path + ": the plan is truncated or corrupt (a header of " +
                                             llvm::Twine(data.size()) + " bytes); " + kRecompile);
  const uint32_t version = uint32_t(getLE(data.data(), 4)), crc = uint32_t(getLE(data.data() + 4, 4));
  const uint64_t size = getLE(data.data() + 8, 8);
  data = data.drop_front(kHeaderBytes);
  // Formats 4 to 7 and 9 to 14 are 15 without its additions (6: GPU AdamW
  // for streamed units; 7: steps that overlap; 9: micro-batches through each
  // unit in a pass; 10: checkpoint offload; 11: stashed attention operands;
  // 12: bf16 copies of the weight slots; 13: weights streamed as bf16; 14:
  // several GPUs; 15: unread rows stepped early). There is no 8: a header's
  // first byte would read as a headerless plan's.
  if (version != kFormatVersion && (version < 4 || version > 14 || version == 8)) {
    // Name the megac that wrote it where the payload still parses.
    std::string writer = parseWholeMessage(data, p) ? p.megac_version() : std::string("?");
    return otherVersion(path, version, writer);
  }
  if (size != data.size())
    return err(path + ": the plan is truncated or corrupt (its header says " + llvm::Twine(size) +
               " bytes follow, the file has " + llvm::Twine(data.size()) + "); " + kRecompile);
  if (uint32_t c = crc32Of(data); c != crc) {
    char detail[64];
    std::snprintf(detail, sizeof detail, " (CRC-32 %08x, the header records %08x)", c, crc);
    return err(path + ": corrupt: checksum mismatch" + detail + "; " + kRecompile);
  }
  if (!parseWholeMessage(data, p)) return err(path + ": the plan is truncated or corrupt");
  if (p.format_version() != version)
    return err(path + ": the plan is truncated or corrupt (format version " + llvm::Twine(p.format_version()) +
               " under a header of version " + llvm::Twine(version) + "); " + kRecompile);
  if (p.has_schedule())
    if (auto e = checkPlan(p)) return err(path + ": " + llvm::toString(std::move(e)));
  // Format 5 records the model relative to the plan; format 4's is absolute already.
  if (!p.model_path().empty() && llvm::sys::path::is_relative(p.model_path())) {
    llvm::SmallString<256> m(parentOf(path));
    llvm::sys::path::append(m, p.model_path());
    llvm::sys::path::remove_dots(m, true);
    p.set_model_path(std::string(m));
  }
  return p;
}

llvm::Error applyNoDecay(Plan &p) {
  const std::string &pattern = p.optimizer().no_decay();
  llvm::Regex re("^(" + pattern + ")$");
  std::string why;
  if (!pattern.empty() && !re.isValid(why)) return err("--no-decay: bad regex: " + why);
  for (auto &param : *p.mutable_parameters()) param.set_decay(pattern.empty() || !re.match(param.name()));
  return llvm::Error::success();
}

TensorType typeProto(megac::DType dtype, const Shape &shape) {
  TensorType t;
  t.set_dtype(plan::DType(int(dtype)));
  for (int64_t d : shape) t.add_shape(d);
  return t;
}

void toProto(const megac::Tensor &t, Constant &c) {
  *c.mutable_type() = typeProto(t.dtype(), t.shape());
  if (t.raw()) c.set_data(std::string(static_cast<const char *>(t.raw()), t.nbytes()));
}

llvm::Expected<megac::Tensor> fromProto(const Constant &c) {
  Shape shape(c.type().shape().begin(), c.type().shape().end());
  megac::DType dt = megac::DType(int(c.type().dtype()));
  if (dtypeSize(dt) == 0) return err("constant of unsupported element type");
  megac::Tensor t(dt, shape);
  if (c.data().size() != t.nbytes())
    return err("constant has " + llvm::Twine(c.data().size()) + " bytes; its type needs " + llvm::Twine(t.nbytes()));
  std::memcpy(t.raw(), c.data().data(), t.nbytes());
  return t;
}

void toProto(const megac::Attrs &attrs, google::protobuf::RepeatedPtrField<Attribute> &out) {
  for (const auto &kv : attrs.all()) {
    if (llvm::StringRef(kv.first).startswith("megac.unit")) continue;
    Attribute *a = out.Add();
    a->set_name(kv.first);
    const Attr &v = kv.second;
    switch (v.kind) {
    case Attr::Kind::Int: a->set_i(v.i); break;
    case Attr::Kind::Float: a->set_f(v.f); break;
    case Attr::Kind::String: a->set_s(v.s); break;
    case Attr::Kind::Ints: a->mutable_ints()->mutable_v()->Add(v.ints.begin(), v.ints.end()); break;
    case Attr::Kind::Floats: a->mutable_floats()->mutable_v()->Add(v.floats.begin(), v.floats.end()); break;
    case Attr::Kind::Strings:
      for (const auto &s : v.strings) a->mutable_strings()->add_v(s);
      break;
    case Attr::Kind::Tensor: toProto(v.t, *a->mutable_tensor()); break;
    }
  }
}

llvm::Expected<megac::Attrs> fromProto(const google::protobuf::RepeatedPtrField<Attribute> &in) {
  megac::Attrs attrs;
  for (const Attribute &a : in) {
    switch (a.value_case()) {
    case Attribute::kI: attrs.set(a.name(), Attr::ofInt(a.i())); break;
    case Attribute::kF: attrs.set(a.name(), Attr::ofFloat(a.f())); break;
    case Attribute::kS: attrs.set(a.name(), Attr::ofString(a.s())); break;
    case Attribute::kInts: attrs.set(a.name(), Attr::ofInts({a.ints().v().begin(), a.ints().v().end()})); break;
    case Attribute::kFloats: attrs.set(a.name(), Attr::ofFloats({a.floats().v().begin(), a.floats().v().end()})); break;
    case Attribute::kStrings: attrs.set(a.name(), Attr::ofStrings({a.strings().v().begin(), a.strings().v().end()})); break;
    case Attribute::kTensor: {
      auto t = fromProto(a.tensor());
      if (!t) return t.takeError();
      attrs.set(a.name(), Attr::ofTensor(*t));
      break;
    }
    default: return err("attribute '" + a.name() + "' has no value");
    }
  }
  return attrs;
}

Optimizer defaultOptimizer() {
  Optimizer o;
  o.set_lr(1e-3f);
  o.set_beta1(0.9f);
  o.set_beta2(0.999f);
  o.set_eps(1e-8f);
  o.set_weight_decay(0.01f);
  o.set_schedule("constant");
  o.set_grad_accum(1);
  return o;
}

} // namespace megac::plan
