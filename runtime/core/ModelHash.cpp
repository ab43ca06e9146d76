#include "runtime/core/ModelHash.h"

#include "runtime/core/Hash.h"

#include "onnx.pb.h"

#include <string>

namespace megac {

namespace {

struct Hasher {
  uint64_t h = kFnvOffset;
  void add(const std::string &s) {
    const uint64_t n = s.size();
    h = fnv1a(h, &n, sizeof n); // the length first: "ab","c" and "a","bc" differ
    h = fnv1a(h, s.data(), s.size());
  }
  void add(int64_t v) { h = fnv1a(h, &v, sizeof v); }
};

} // namespace

uint64_t onnxModelHash(const onnx::ModelProto &m) {
  Hasher x;
  for (const auto &o : m.opset_import()) {
    x.add(o.domain());
    x.add(int64_t(o.version()));
  }
  const onnx::GraphProto &g = m.graph();
  for (const auto *list : {&g.input(), &g.output()}) {
    x.add(int64_t(list->size()));
    for (const auto &v : *list) {
      x.add(v.name());
      x.add(v.type().SerializeAsString());
    }
  }
  x.add(int64_t(g.node_size()));
  for (const auto &n : g.node()) {
    x.add(n.op_type());
    x.add(n.domain());
    x.add(int64_t(n.input_size()));
    for (const std::string &s : n.input()) x.add(s);
    x.add(int64_t(n.output_size()));
    for (const std::string &s : n.output()) x.add(s);
    for (const auto &a : n.attribute()) x.add(a.SerializeAsString());
  }
  x.add(int64_t(g.initializer_size()));
  for (const auto &t : g.initializer()) {
    x.add(t.name());
    x.add(int64_t(t.data_type()));
    x.add(int64_t(t.dims_size()));
    for (int64_t d : t.dims()) x.add(d);
  }
  return x.h;
}

} // namespace megac
