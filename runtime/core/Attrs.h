#pragma once
#include "runtime/core/Tensor.h"

#include <map>
#include <string>
#include <vector>

namespace megac {

// One op attribute, as in ONNX (graph-valued attributes are not supported).
struct Attr {
  enum class Kind { Int, Float, String, Ints, Floats, Strings, Tensor };
  Kind kind = Kind::Int;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  megac::Tensor t;

  static Attr ofInt(int64_t v) { Attr a; a.kind = Kind::Int; a.i = v; return a; }
  static Attr ofFloat(float v) { Attr a; a.kind = Kind::Float; a.f = v; return a; }
  static Attr ofString(std::string v) { Attr a; a.kind = Kind::String; a.s = std::move(v); return a; }
  static Attr ofInts(std::vector<int64_t> v) { Attr a; a.kind = Kind::Ints; a.ints = std::move(v); return a; }
  static Attr ofFloats(std::vector<float> v) { Attr a; a.kind = Kind::Floats; a.floats = std::move(v); return a; }
  static Attr ofStrings(std::vector<std::string> v) { Attr a; a.kind = Kind::Strings; a.strings = std::move(v); return a; }
  static Attr ofTensor(megac::Tensor v) { Attr a; a.kind = Kind::Tensor; a.t = std::move(v); return a; }
  bool operator==(const Attr &o) const;
};

// Attributes by name, sorted (so printing is deterministic).
class Attrs {
public:
  bool has(const std::string &n) const { return m_.count(n) != 0; }
  const Attr *get(const std::string &n) const {
    auto it = m_.find(n);
    return it == m_.end() ? nullptr : &it->second;
  }
  int64_t getInt(const std::string &n, int64_t dflt) const;
  float getFloat(const std::string &n, float dflt) const;
  std::string getString(const std::string &n, const std::string &dflt) const;
  std::vector<int64_t> getInts(const std::string &n, std::vector<int64_t> dflt = {}) const;
  std::vector<float> getFloats(const std::string &n, std::vector<float> dflt = {}) const;
  void set(const std::string &n, Attr a) { m_[n] = std::move(a); }
  void erase(const std::string &n) { m_.erase(n); }
  const std::map<std::string, Attr> &all() const { return m_; }
  bool empty() const { return m_.empty(); }
  bool operator==(const Attrs &o) const { return m_ == o.m_; }

private:
  std::map<std::string, Attr> m_;
};

} // namespace megac
