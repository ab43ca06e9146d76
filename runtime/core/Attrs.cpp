#include "runtime/core/Attrs.h"

#include <algorithm>

namespace megac {

bool Attr::operator==(const Attr &o) const {
  if (kind != o.kind) return false;
  switch (kind) {
  case Kind::Int: return i == o.i;
  case Kind::Float: return f == o.f || (f != f && o.f != o.f);
  case Kind::String: return s == o.s;
  case Kind::Ints: return ints == o.ints;
  case Kind::Floats: // NaN equals NaN, as for Kind::Float
    return std::equal(floats.begin(), floats.end(), o.floats.begin(), o.floats.end(),
                      [](float x, float y) { return x == y || (x != x && y != y); });
  case Kind::Strings: return strings == o.strings;
  case Kind::Tensor: return t.identical(o.t);
  }
  return false;
}

int64_t Attrs::getInt(const std::string &n, int64_t dflt) const {
  const Attr *a = get(n);
  return a && a->kind == Attr::Kind::Int ? a->i : dflt;
}
float Attrs::getFloat(const std::string &n, float dflt) const {
  const Attr *a = get(n);
  if (!a) return dflt;
  if (a->kind == Attr::Kind::Float) return a->f;
  if (a->kind == Attr::Kind::Int) return float(a->i);
  return dflt;
}
std::string Attrs::getString(const std::string &n, const std::string &dflt) const {
  const Attr *a = get(n);
  return a && a->kind == Attr::Kind::String ? a->s : dflt;
}
std::vector<int64_t> Attrs::getInts(const std::string &n, std::vector<int64_t> dflt) const {
  const Attr *a = get(n);
  return a && a->kind == Attr::Kind::Ints ? a->ints : dflt;
}
std::vector<float> Attrs::getFloats(const std::string &n, std::vector<float> dflt) const {
  const Attr *a = get(n);
  return a && a->kind == Attr::Kind::Floats ? a->floats : dflt;
}

} // namespace megac
