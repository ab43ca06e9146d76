// fuse-gelu: rewrites GELU written as separate ops into Gelu (opset 20):
//   tanh form (GPT-2's gelu_new, torch's approximate="tanh"):
//     0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
//     -> Gelu(x) {approximate = "tanh"}
//   erf form (torch's default):
//     0.5 * x * (1 + Erf(x / sqrt(2)))  -> Gelu(x)
// The products may be grouped and ordered any way (scalar constants are
// multiplied together, Div by a constant is a product), x^3 is Pow(x, 3) or
// x * x * x, the 1 may be on either side of its Add. Constants are compared
// with a relative tolerance of 1e-6 (exporters round them to f32). Every
// intermediate value must be used by the chain alone and have x's type.
#include "passes/Match.h"
#include "passes/Pass.h"

#include <algorithm>
#include <cmath>

namespace megac::passes {

using namespace ir;

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kTanhCubic = 0.044715;
constexpr double kInvSqrt2 = 0.7071067811865476;

struct GeluMatch {
  ValueId y = kNoValue, x = kNoValue;
  bool tanh = false;
};

class GeluMatcher {
public:
  explicit GeluMatcher(Graph &g) : m_(g) {}
  std::optional<GeluMatch> match(const Op &mul);

private:
  bool cubicTerm(ValueId v, const Op *user, ValueId x);
  bool tanhArgument(ValueId v, const Op *user, ValueId x);
  std::optional<bool> onePlus(ValueId v, const Op *user, ValueId x);

  Matcher m_;
};

// v = 0.044715 * x^3, with x^3 as Pow(x, 3) or x * x * x, used by `user` alone.
bool GeluMatcher::cubicTerm(ValueId v, const Op *user, ValueId x) {
  if (!m_.onlyUsedBy(v, user)) return false;
  Matcher::Product p = m_.product(v);
  if (!nearlyEqual(p.scale, kTanhCubic)) return false;
  if (p.leaves.size() == 3)
    return std::all_of(p.leaves.begin(), p.leaves.end(), [&](ValueId l) { return l == x; });
  if (p.leaves.size() != 1 || !p.users[0]) return false;
  const Op *pow = m_.defOf(p.leaves[0], "Pow", 2);
  auto e = pow ? m_.scalarConst(pow->inputs[1]) : std::nullopt;
  return pow && pow->inputs[0] == x && e && *e == 3 && m_.onlyUsedBy(p.leaves[0], p.users[0]);
}

// v = sqrt(2/pi) * (x + 0.044715 * x^3), used by `user` alone.
bool GeluMatcher::tanhArgument(ValueId v, const Op *user, ValueId x) {
  if (!m_.onlyUsedBy(v, user)) return false;
  Matcher::Product p = m_.product(v);
  if (p.leaves.size() != 1 || !p.users[0] || !nearlyEqual(p.scale, kSqrt2OverPi)) return false;
  ValueId sum = p.leaves[0];
  const Op *add = m_.defOf(sum, "Add", 2);
  if (!add || !m_.onlyUsedBy(sum, p.users[0])) return false;
  ValueId cubic = Matcher::otherOperand(*add, x);
  return cubic != kNoValue && cubic != x && m_.type(cubic) == m_.type(x) && cubicTerm(cubic, add, x);
}

// v = 1 + Tanh(a) or 1 + Erf(b), used by `user` alone: whether it is the
// tanh form, or nullopt.
std::optional<bool> GeluMatcher::onePlus(ValueId v, const Op *user, ValueId x) {
  const Op *add = m_.defOf(v, "Add", 2);
  if (!add || !m_.onlyUsedBy(v, user) || m_.type(v) != m_.type(x)) return std::nullopt;
  for (int side : {0, 1}) {
    auto one = m_.scalarConst(add->inputs[size_t(side)]);
    ValueId t = add->inputs[size_t(1 - side)];
    if (!one || *one != 1 || m_.type(t) != m_.type(x) || !m_.onlyUsedBy(t, add)) continue;
    if (const Op *th = m_.defOf(t, "Tanh", 1)) {
      if (tanhArgument(th->inputs[0], th, x)) return true;
    } else if (const Op *erf = m_.defOf(t, "Erf", 1)) {
      ValueId a = erf->inputs[0];
      if (!m_.onlyUsedBy(a, erf)) continue;
      Matcher::Product p = m_.product(a);
      if (p.leaves.size() == 1 && p.leaves[0] == x && p.users[0] && nearlyEqual(p.scale, kInvSqrt2)) return false;
    }
  }
  return std::nullopt;
}

std::optional<GeluMatch> GeluMatcher::match(const Op &mul) {
  if (mul.type != "Mul" || mul.outputs.size() != 1) return std::nullopt;
  GeluMatch r;
  r.y = mul.outputs[0];
  const TensorType &yt = m_.type(r.y);
  if (yt.dtype != DType::F32 && yt.dtype != DType::F64) return std::nullopt;
  // y = 0.5 * x * s: two non-constant leaves, x and s = 1 + Tanh/Erf(...).
  Matcher::Product p = m_.product(r.y);
  if (p.leaves.size() != 2 || !nearlyEqual(p.scale, 0.5)) return std::nullopt;
  for (size_t side : {0, 1}) {
    ValueId x = p.leaves[side], s = p.leaves[1 - side];
    if (x == s || m_.type(x) != yt || !p.users[1 - side]) continue;
    auto tanh = onePlus(s, p.users[1 - side], x);
    if (!tanh) continue;
    r.x = x;
    r.tanh = *tanh;
    return r;
  }
  return std::nullopt;
}

} // namespace

llvm::Error fuseGelu(Graph &g, const PassOptions &) {
  std::vector<GeluMatch> matches;
  {
    GeluMatcher matcher(g);
    for (const Op &op : g.ops)
      if (!op.dead && op.type == "Mul")
        if (auto r = matcher.match(op)) matches.push_back(*r);
  }
  if (matches.empty()) return llvm::Error::success();
  for (const GeluMatch &r : matches) {
    Op gelu;
    gelu.type = "Gelu";
    gelu.inputs = {r.x};
    gelu.outputs = {r.y};
    if (r.tanh) gelu.attrs.set("approximate", Attr::ofString("tanh"));
    replaceProducer(g, r.y, std::move(gelu));
  }
  markUnusedOpsDead(g, g.outputs);
  g.compact();
  return llvm::Error::success();
}

} // namespace megac::passes
