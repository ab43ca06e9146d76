#include "runtime/plan/PlanIO.h"

#include "runtime/core/TensorFile.h"
#include "runtime/plan/PlanChecker.h"


#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"

#include <cstring>

namespace megac::plan {

static llvm::Error err(const llvm::Twine &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m.str());
}

// A plan file: the magic "MEGACPLN", then the serialized Plan message.
static constexpr char kMagic[8] = {'M', 'E', 'G', 'A', 'C', 'P', 'L', 'N'};

llvm::Error writePlan(const Plan &p, const std::string &path) {
  std::string bytes(kMagic, sizeof kMagic);
  if (!p.AppendToString(&bytes)) return err(path + ": cannot serialize the plan");
  return writeFileAtomically(path, bytes);
}

llvm::Expected<Plan> readPlan(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buf) return err(path + ": cannot read: " + buf.getError().message());
  llvm::StringRef data = (*buf)->getBuffer();
  if (data.size() < sizeof kMagic || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0)
    return err(path + ": not a megac plan file");
  data = data.drop_front(sizeof kMagic);
  Plan p;
  if (!parseWholeMessage(data, p)) return err(path + ": the plan is truncated or corrupt");
  if (p.format_version() != kFormatVersion)
    return err(path + ": plan format version " + llvm::Twine(p.format_version()) + " (megac " + p.megac_version() +
               "); this megac reads version " + llvm::Twine(kFormatVersion) + ": recompile the model with megac compile");
  if (p.has_schedule())
    if (auto e = checkPlan(p)) return err(path + ": " + llvm::toString(std::move(e)));
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

} // namespace megac::plan
