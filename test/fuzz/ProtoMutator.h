#pragma once
// A structure-aware mutation for the targets whose input is a protobuf
// message (ONNX models, plans, checkpoint metas), used as libFuzzer's
// LLVMFuzzerCustomMutator. Byte-level mutation rarely gets past a protobuf
// parser with a changed size: every length prefix around the change breaks
// (a 1.1M-run import campaign never set an initializer's dims to a large
// value). So half of the mutations parse the input, change one field
// through reflection (an integer to a size that overflows, a float to NaN,
// a repeated element dropped or duplicated, bytes cut or grown, a name
// swapped for another) and serialize it again; the other half are
// libFuzzer's own. Deterministic for a given seed. Debian has no
// libprotobuf-mutator; this is the small part of it these targets need.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace megac::fuzz {

namespace proto_mutator {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

struct Slot {
  Message *msg;
  const FieldDescriptor *field;
  int index; // -1: a singular field
};

inline void collect(Message &m, std::vector<Slot> &scalars, std::vector<Slot> &repeated,
                    std::vector<std::string> &strings, int depth) {
  if (depth > 24) return;
  const Reflection *r = m.GetReflection();
  const auto *d = m.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor *f = d->field(i);
    if (f->is_repeated()) {
      repeated.push_back({&m, f, -1});
      int n = r->FieldSize(m, f);
      for (int k = 0; k < n; ++k) {
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE)
          collect(*r->MutableRepeatedMessage(&m, f, k), scalars, repeated, strings, depth + 1);
        else {
          scalars.push_back({&m, f, k});
          if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING && f->type() == FieldDescriptor::TYPE_STRING)
            strings.push_back(r->GetRepeatedString(m, f, k));
        }
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (r->HasField(m, f)) collect(*r->MutableMessage(&m, f), scalars, repeated, strings, depth + 1);
    } else {
      scalars.push_back({&m, f, -1});
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING && f->type() == FieldDescriptor::TYPE_STRING)
        strings.push_back(r->GetString(m, f));
    }
  }
}

// Sizes that overflow element counts and byte counts, or are negative.
inline int64_t interestingInt(std::minstd_rand &rng, int64_t v) {
  static const int64_t kValues[] = {0,
                                    1,
                                    2,
                                    -1,
                                    -5,
                                    7,
                                    64,
                                    255,
                                    65536,
                                    2147483647,
                                    2147483648LL,
                                    4294967296LL,
                                    4294967297LL,
                                    int64_t(1) << 40,
                                    (int64_t(1) << 61) + 8,
                                    (int64_t(1) << 62) + 4,
                                    (int64_t(1) << 62) + 16,
                                    std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min()};
  switch (rng() % 6) {
  case 0: return int64_t(uint64_t(v) + 1); // wrapping, as the mutator's own arithmetic must not overflow
  case 1: return int64_t(uint64_t(v) - 1);
  case 2: return int64_t(uint64_t(v) * 2);
  case 3: return int64_t(uint64_t(v) ^ (uint64_t(1) << (rng() % 63)));
  default: return kValues[rng() % (sizeof kValues / sizeof kValues[0])];
  }
}

inline double interestingDouble(std::minstd_rand &rng) {
  static const double kValues[] = {0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, 3.4e38, -3.4e38,
                                   std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                                   std::numeric_limits<double>::quiet_NaN(), 1e300};
  return kValues[rng() % (sizeof kValues / sizeof kValues[0])];
}

inline void mutateScalar(const Slot &s, std::minstd_rand &rng, const std::vector<std::string> &strings) {
  Message &m = *s.msg;
  const Reflection *r = m.GetReflection();
  const FieldDescriptor *f = s.field;
  const bool rep = s.index >= 0;
  switch (f->cpp_type()) {
  case FieldDescriptor::CPPTYPE_INT32: {
    int64_t v = rep ? r->GetRepeatedInt32(m, f, s.index) : r->GetInt32(m, f);
    int32_t nv = int32_t(interestingInt(rng, v));
    rep ? r->SetRepeatedInt32(&m, f, s.index, nv) : r->SetInt32(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_INT64: {
    int64_t v = rep ? r->GetRepeatedInt64(m, f, s.index) : r->GetInt64(m, f);
    int64_t nv = interestingInt(rng, v);
    rep ? r->SetRepeatedInt64(&m, f, s.index, nv) : r->SetInt64(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_UINT32: {
    int64_t v = rep ? r->GetRepeatedUInt32(m, f, s.index) : r->GetUInt32(m, f);
    uint32_t nv = uint32_t(interestingInt(rng, v));
    rep ? r->SetRepeatedUInt32(&m, f, s.index, nv) : r->SetUInt32(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_UINT64: {
    int64_t v = int64_t(rep ? r->GetRepeatedUInt64(m, f, s.index) : r->GetUInt64(m, f));
    uint64_t nv = uint64_t(interestingInt(rng, v));
    rep ? r->SetRepeatedUInt64(&m, f, s.index, nv) : r->SetUInt64(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_FLOAT: {
    float nv = float(interestingDouble(rng));
    rep ? r->SetRepeatedFloat(&m, f, s.index, nv) : r->SetFloat(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_DOUBLE: {
    double nv = interestingDouble(rng);
    rep ? r->SetRepeatedDouble(&m, f, s.index, nv) : r->SetDouble(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_BOOL: {
    bool v = rep ? r->GetRepeatedBool(m, f, s.index) : r->GetBool(m, f);
    rep ? r->SetRepeatedBool(&m, f, s.index, !v) : r->SetBool(&m, f, !v);
    break;
  }
  case FieldDescriptor::CPPTYPE_ENUM: {
    // Known values only: proto2 enums (ONNX's) are closed.
    const auto *e = f->enum_type();
    const auto *nv = e->value(int(rng() % unsigned(e->value_count())));
    rep ? r->SetRepeatedEnum(&m, f, s.index, nv) : r->SetEnum(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_STRING: {
    std::string v = rep ? r->GetRepeatedString(m, f, s.index) : r->GetString(m, f);
    if (f->type() == FieldDescriptor::TYPE_BYTES) {
      // Tensor bytes: cut, grown or emptied (sizes that disagree with shapes).
      switch (rng() % 4) {
      case 0: v.resize(v.size() / 2); break;
      case 1: v.resize(v.size() ? v.size() - 1 : 0); break;
      case 2: v += v.substr(0, std::min<size_t>(v.size(), 4096)) + std::string(rng() % 9, '\xff'); break;
      default: v.clear(); break;
      }
    } else if (!strings.empty() && rng() % 2) {
      v = strings[rng() % strings.size()]; // a name that exists elsewhere: duplicates, cycles
    } else {
      switch (rng() % 3) {
      case 0: v.clear(); break;
      case 1: v += "x"; break;
      default: v = "../" + v; break;
      }
    }
    rep ? r->SetRepeatedString(&m, f, s.index, v) : r->SetString(&m, f, v);
    break;
  }
  case FieldDescriptor::CPPTYPE_MESSAGE: break;
  }
}

// Drops, duplicates or appends an element of a repeated field.
inline void mutateRepeated(const Slot &s, std::minstd_rand &rng) {
  Message &m = *s.msg;
  const Reflection *r = m.GetReflection();
  const FieldDescriptor *f = s.field;
  int n = r->FieldSize(m, f);
  unsigned op = n == 0 ? 2 : rng() % 3;
  if (op == 0) { // drop one: swap it to the end, remove the last
    int k = int(rng() % unsigned(n));
    r->SwapElements(&m, f, k, n - 1);
    r->RemoveLast(&m, f);
    return;
  }
  if (op == 1 && f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) { // duplicate one
    int k = int(rng() % unsigned(n));
    Message *copy = r->AddMessage(&m, f);
    copy->CopyFrom(r->GetRepeatedMessage(m, f, k));
    return;
  }
  switch (f->cpp_type()) { // append
  case FieldDescriptor::CPPTYPE_INT32: r->AddInt32(&m, f, int32_t(interestingInt(rng, 1))); break;
  case FieldDescriptor::CPPTYPE_INT64: r->AddInt64(&m, f, interestingInt(rng, 1)); break;
  case FieldDescriptor::CPPTYPE_UINT32: r->AddUInt32(&m, f, uint32_t(interestingInt(rng, 1))); break;
  case FieldDescriptor::CPPTYPE_UINT64: r->AddUInt64(&m, f, uint64_t(interestingInt(rng, 1))); break;
  case FieldDescriptor::CPPTYPE_FLOAT: r->AddFloat(&m, f, float(interestingDouble(rng))); break;
  case FieldDescriptor::CPPTYPE_DOUBLE: r->AddDouble(&m, f, interestingDouble(rng)); break;
  case FieldDescriptor::CPPTYPE_BOOL: r->AddBool(&m, f, true); break;
  case FieldDescriptor::CPPTYPE_ENUM: r->AddEnum(&m, f, f->enum_type()->value(0)); break;
  case FieldDescriptor::CPPTYPE_STRING: r->AddString(&m, f, n ? r->GetRepeatedString(m, f, 0) : "x"); break;
  case FieldDescriptor::CPPTYPE_MESSAGE:
    if (n) r->AddMessage(&m, f)->CopyFrom(r->GetRepeatedMessage(m, f, 0));
    else r->AddMessage(&m, f);
    break;
  }
}

} // namespace proto_mutator

// The body of LLVMFuzzerCustomMutator for inputs that are `prefix` followed
// by a serialized Msg.
template <typename Msg>
size_t mutateProto(uint8_t *data, size_t size, size_t maxSize, unsigned seed, const std::string &prefix = "") {
  using namespace proto_mutator;
  std::minstd_rand rng(seed | 1);
  if (rng() % 2 == 0 || size < prefix.size() || std::memcmp(data, prefix.data(), prefix.size()) != 0)
    return LLVMFuzzerMutate(data, size, maxSize);
  Msg msg;
  if (!msg.ParseFromArray(data + prefix.size(), int(size - prefix.size()))) return LLVMFuzzerMutate(data, size, maxSize);
  std::vector<Slot> scalars, repeated;
  std::vector<std::string> strings;
  collect(msg, scalars, repeated, strings, 0);
  int changes = 1 + int(rng() % 3);
  for (int i = 0; i < changes; ++i) {
    if (!repeated.empty() && (scalars.empty() || rng() % 4 == 0)) {
      mutateRepeated(repeated[rng() % repeated.size()], rng);
      break; // the slots may now point at removed elements: stop here
    }
    if (!scalars.empty()) mutateScalar(scalars[rng() % scalars.size()], rng, strings);
  }
  std::string out = prefix;
  if (!msg.AppendToString(&out) || out.size() > maxSize) return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

} // namespace megac::fuzz
