// Attention and megac.AttentionGrad on the GPU (batched cuBLASLt GEMMs and a
// row softmax kernel) against the CPU kernels: 4-D and 3-D inputs, GQA,
// is_causal, scale, softcap, bool/float masks broadcast from every rank
// (fully masked rows, masks shorter than the keys), a past KV cache with the
// present outputs, nonpad_kv_seqlen, sliding windows, every
// qk_matmul_output mode, rows long enough for the block-per-row kernel, and
// each compute mode.
#include "GpuOpCheck.h"

#include "runtime/plan/StreamLayout.h"

#include <optional>

using namespace megac;
using namespace megac::gputest;
using cuda::ComputeMode;

namespace {


enum class MaskKind { None, Bool, Float };

struct AttnSpec {
  int64_t B = 2, H = 4, KVH = 4, S = 7, L = 7, D = 16, Dv = 16; // L: new keys (past excluded)
  bool is3D = false;
  bool causal = false;
  float softcap = 0;
  std::optional<float> scale;
  MaskKind mask = MaskKind::None;
  Shape maskShape;
  bool maskFullyMaskedRow = false; // a bool mask with one query row all false
  int64_t past = -1;               // >= 0: past_key / past_value of this length
  bool presentOutputs = false;     // request present_key / present_value
  std::vector<int64_t> nonpad;
  bool nonpadConstant = true;
  int64_t qkMode = -1;
  int64_t left = -1, right = -1;
  ComputeMode mode = ComputeMode::FP32;

  int64_t T() const { return std::max<int64_t>(past, 0) + L; }
  Shape q() const { return is3D ? Shape{B, S, H * D} : Shape{B, H, S, D}; }
  Shape k() const { return is3D ? Shape{B, L, KVH * D} : Shape{B, KVH, L, D}; }
  Shape v() const { return is3D ? Shape{B, L, KVH * Dv} : Shape{B, KVH, L, Dv}; }
  Shape y() const { return is3D ? Shape{B, S, H * Dv} : Shape{B, H, S, Dv}; }
};

Attrs attnAttrs(const AttnSpec &s) {
  Attrs a;
  if (s.is3D) {
    a.set("q_num_heads", Attr::ofInt(s.H));
    a.set("kv_num_heads", Attr::ofInt(s.KVH));
  }
  if (s.causal) a.set("is_causal", Attr::ofInt(1));
  if (s.softcap > 0) a.set("softcap", Attr::ofFloat(s.softcap));
  if (s.scale) a.set("scale", Attr::ofFloat(*s.scale));
  if (s.qkMode >= 0) a.set("qk_matmul_output_mode", Attr::ofInt(s.qkMode));
  if (s.left >= 0) a.set("left_window_size", Attr::ofInt(s.left));
  if (s.right >= 0) a.set("right_window_size", Attr::ofInt(s.right));
  return a;
}

Tensor makeMask(const AttnSpec &s, unsigned seed) {
  if (s.mask == MaskKind::Float) {
    // Finite values only: a -inf score would make qk_matmul_output's
    // -inf - -inf comparison NaN; masking to -inf is covered by bool masks.
    return randomTensor(s.maskShape, seed, DType::F32, -2, 1);
  }
  Tensor m(DType::Bool, s.maskShape);
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < m.numel(); ++i) m.data<uint8_t>()[i] = rng() % 4 != 0;
  if (s.maskFullyMaskedRow) {
    const int64_t len = s.maskShape.back();
    for (int64_t j = 0; j < len; ++j) m.data<uint8_t>()[len + j] = 0; // the second row
  }
  return m;
}

// Inputs at their ONNX positions; `dy` first for the gradient op.
void addAttentionInputs(const AttnSpec &s, unsigned seed, OpCase &c, bool grad) {
  c.inputs.push_back(randomTensor(s.q(), seed));
  c.inputs.push_back(randomTensor(s.k(), seed + 1));
  c.inputs.push_back(randomTensor(s.v(), seed + 2));
  const bool hasNonpad = !s.nonpad.empty();
  const bool hasPast = !grad && s.past >= 0;
  if (s.mask != MaskKind::None) c.inputs.push_back(makeMask(s, seed + 3));
  else if (hasPast || hasNonpad) c.inputs.emplace_back();
  if (hasPast) {
    c.inputs.push_back(randomTensor({s.B, s.KVH, s.past, s.D}, seed + 4));
    c.inputs.push_back(randomTensor({s.B, s.KVH, s.past, s.Dv}, seed + 5));
  } else if (!grad && hasNonpad) {
    c.inputs.emplace_back();
    c.inputs.emplace_back();
  }
  if (hasNonpad) {
    c.inputs.push_back(Tensor::fromVector<int64_t>(DType::I64, {s.B}, s.nonpad));
    c.constant.assign(c.inputs.size(), false);
    c.constant.back() = s.nonpadConstant;
  }
}

OpCase attentionCase(const AttnSpec &s, unsigned seed) {
  OpCase c;
  c.op = "Attention";
  c.attrs = attnAttrs(s);
  addAttentionInputs(s, seed, c, false);
  const int64_t T = s.T();
  const bool present = s.presentOutputs || s.past >= 0;
  c.outputs.push_back({DType::F32, s.y()});
  c.outputs.push_back({present ? DType::F32 : DType::Undefined, {s.B, s.KVH, T, s.D}});
  c.outputs.push_back({present ? DType::F32 : DType::Undefined, {s.B, s.KVH, T, s.Dv}});
  if (s.qkMode >= 0) c.outputs.push_back({DType::F32, {s.B, s.H, s.S, T}});
  c.mode = s.mode;
  return c;
}

OpCase attentionGradCase(const AttnSpec &s, unsigned seed) {
  OpCase c;
  c.op = "megac.AttentionGrad";
  c.attrs = attnAttrs(s);
  c.inputs.push_back(randomTensor(s.y(), seed + 10));
  addAttentionInputs(s, seed, c, true);
  c.outputs = {{DType::F32, s.q()}, {DType::F32, s.k()}, {DType::F32, s.v()}};
  c.mode = s.mode;
  return c;
}

double forwardTol(ComputeMode m) { return m == ComputeMode::FP32 ? 1e-4 : m == ComputeMode::TF32 ? 1e-2 : 3e-2; }
double gradTol(ComputeMode m) { return m == ComputeMode::FP32 ? 2e-4 : m == ComputeMode::TF32 ? 2e-2 : 6e-2; }

void expectForward(const AttnSpec &s, const std::string &what, unsigned seed = 1) {
  SCOPED_TRACE("Attention " + what);
  EXPECT_GPU_MATCHES_CPU(attentionCase(s, seed), gpu(), forwardTol(s.mode));
}

void expectGrad(const AttnSpec &s, const std::string &what, unsigned seed = 1) {
  SCOPED_TRACE("AttentionGrad " + what);
  EXPECT_GPU_MATCHES_CPU(attentionGradCase(s, seed), gpu(), gradTol(s.mode));
}

// The configurations both directions run through.
std::vector<std::pair<std::string, AttnSpec>> commonSpecs() {
  std::vector<std::pair<std::string, AttnSpec>> r;
  AttnSpec base;
  r.push_back({"basic 4-D", base});
  AttnSpec causal = base;
  causal.causal = true;
  r.push_back({"causal", causal});
  AttnSpec gqa = base;
  gqa.H = 4, gqa.KVH = 2, gqa.S = 5, gqa.L = 9, gqa.causal = true;
  r.push_back({"GQA 4/2 causal, S != L", gqa});
  AttnSpec gqa1 = base;
  gqa1.H = 6, gqa1.KVH = 1, gqa1.S = 3, gqa1.L = 11;
  r.push_back({"MQA 6/1", gqa1});
  AttnSpec threeD = base;
  threeD.is3D = true, threeD.H = 4, threeD.KVH = 2, threeD.S = 6, threeD.L = 6, threeD.D = 8, threeD.Dv = 12;
  threeD.causal = true;
  r.push_back({"3-D GQA, Dv != D", threeD});
  AttnSpec boolMask = base;
  boolMask.mask = MaskKind::Bool, boolMask.maskShape = {2, 1, 7, 7}, boolMask.maskFullyMaskedRow = true;
  r.push_back({"bool mask [B,1,S,L] with a fully masked row", boolMask});
  AttnSpec floatMask2D = base;
  floatMask2D.mask = MaskKind::Float, floatMask2D.maskShape = {7, 7}, floatMask2D.causal = true;
  r.push_back({"float mask [S,L] + causal", floatMask2D});
  AttnSpec shortMask = base;
  shortMask.mask = MaskKind::Bool, shortMask.maskShape = {5};
  r.push_back({"bool mask [L-2] (padded with -inf)", shortMask});
  AttnSpec headMask = gqa;
  headMask.mask = MaskKind::Float, headMask.maskShape = {2, 4, 5, 9};
  r.push_back({"float mask [B,H,S,L], GQA", headMask});
  AttnSpec softcap = base;
  softcap.softcap = 2.0f, softcap.scale = 0.9f, softcap.causal = true;
  r.push_back({"softcap + scale", softcap});
  AttnSpec nonpad = base;
  nonpad.S = 9, nonpad.L = 9, nonpad.nonpad = {5, 9}, nonpad.causal = true;
  r.push_back({"nonpad_kv_seqlen + causal", nonpad});
  AttnSpec nonpadDevice = nonpad;
  nonpadDevice.nonpadConstant = false, nonpadDevice.causal = false, nonpadDevice.nonpad = {0, 4};
  r.push_back({"nonpad_kv_seqlen on the device (a batch with no keys)", nonpadDevice});
  AttnSpec window = base;
  window.S = 9, window.L = 9, window.left = 2, window.right = 1;
  r.push_back({"sliding window", window});
  AttnSpec windowCausal = window;
  windowCausal.right = -1, windowCausal.causal = true;
  r.push_back({"left window + causal", windowCausal});
  AttnSpec wide = base;
  wide.H = 4, wide.KVH = 2, wide.S = 300, wide.L = 300, wide.D = 64, wide.Dv = 64, wide.causal = true;
  r.push_back({"rows of 300 keys (block per row)", wide});
  AttnSpec wideMask = wide;
  wideMask.is3D = true, wideMask.causal = false, wideMask.mask = MaskKind::Bool, wideMask.maskShape = {2, 1, 1, 300};
  r.push_back({"3-D, 300 keys, key padding mask", wideMask});
  AttnSpec oddHead = base;
  oddHead.D = 13, oddHead.Dv = 7, oddHead.S = 1, oddHead.L = 33;
  r.push_back({"odd head sizes, one query", oddHead});
  return r;
}

TEST(AttentionGpu, Forward) {
  for (auto &[what, s] : commonSpecs()) expectForward(s, what);
}

TEST(AttentionGpu, Backward) {
  for (auto &[what, s] : commonSpecs()) expectGrad(s, what);
}

TEST(AttentionGpu, PastCacheAndPresent) {
  AttnSpec s;
  s.past = 3, s.S = 4, s.L = 4, s.causal = true;
  expectForward(s, "4-D past, causal");
  s.H = 4, s.KVH = 2, s.is3D = true, s.D = 8, s.Dv = 8;
  expectForward(s, "3-D GQA past");
  s.past = 0;
  expectForward(s, "empty past");
  AttnSpec present;
  present.presentOutputs = true;
  expectForward(present, "present without past (4-D)");
  present.is3D = true;
  expectForward(present, "present without past (3-D)");
}

TEST(AttentionGpu, QkMatmulOutputModes) {
  for (int64_t mode = 0; mode < 4; ++mode) {
    AttnSpec s;
    s.H = 4, s.KVH = 2, s.S = 5, s.L = 6, s.softcap = 1.5f, s.qkMode = mode;
    s.mask = MaskKind::Float, s.maskShape = {1, 4, 5, 6};
    expectForward(s, "qk mode " + std::to_string(mode));
  }
  AttnSpec causal; // mode 3 (probabilities) with masked keys: zeros there
  causal.causal = true, causal.qkMode = 3;
  expectForward(causal, "qk mode 3, causal");
}

TEST(AttentionGpu, ComputeModes) {
  for (ComputeMode m : {ComputeMode::TF32, ComputeMode::BF16}) {
    for (auto &[what, s0] : commonSpecs()) {
      AttnSpec s = s0;
      s.mode = m;
      expectForward(s, what + " " + cuda::computeModeName(m), 3);
      expectGrad(s, what + " " + cuda::computeModeName(m), 3);
    }
  }
}

// The materialized path packs its products' operands to bf16 in the bf16
// mode, P included, as the MatMul kernels do: against CPU kernels rounding
// the same way only summation order (and the odd P element on a rounding
// boundary) differs. (Unmasked rows of 64 keys and more go to cuDNN's fused
// attention instead, which rounds its own way: CudnnAttentionGpuTest.)
TEST(AttentionGpu, Bf16RoundsTheProductsOperands) {
  ScopedCpuBf16Operands emulate;
  unsigned seed = 40;
  for (auto &[what, s0] : commonSpecs()) {
    if (s0.S >= 64 && s0.mask == MaskKind::None) continue;
    AttnSpec s = s0;
    s.mode = ComputeMode::BF16;
    SCOPED_TRACE(what);
    EXPECT_GPU_MATCHES_CPU(attentionCase(s, seed), gpu(), 5e-4);
    EXPECT_GPU_MATCHES_CPU(attentionGradCase(s, seed), gpu(), 5e-4);
    ++seed;
  }
}

// Under a score budget of 1000 bytes the materialized path takes a few
// query rows of every (batch, kv head) at a time (plan::attentionChunkRows:
// 2 of basic 4-D's 7 in the gradient, 4 in the forward; 1 of 600 for 300
// keys), the last chunk short, dK and dV summed over chunks: the same results
// as the whole, in fp32 and in bf16 (held to the emulating CPU kernels).
TEST(AttentionGpu, ChunkedRows) {
  plan::ScopedAttentionScoreBudget small(1000);
  ASSERT_EQ(plan::attentionChunkRows(2 * 4, 7, 7, 2), 2);
  ASSERT_EQ(plan::attentionChunkRows(2 * 4, 7, 7, 1), 4);
  unsigned seed = 70;
  for (auto &[what, s0] : commonSpecs()) {
    for (ComputeMode m : {ComputeMode::FP32, ComputeMode::BF16}) {
      if (m == ComputeMode::BF16 && s0.S >= 64 && s0.mask == MaskKind::None) continue; // cuDNN's
      AttnSpec s = s0;
      s.mode = m;
      SCOPED_TRACE(what + " " + cuda::computeModeName(m) + ", chunked");
      std::optional<ScopedCpuBf16Operands> emulate;
      if (m == ComputeMode::BF16) emulate.emplace();
      const double tol = m == ComputeMode::FP32 ? 2e-4 : 5e-4;
      EXPECT_GPU_MATCHES_CPU(attentionCase(s, seed), gpu(), tol);
      EXPECT_GPU_MATCHES_CPU(attentionGradCase(s, seed), gpu(), tol);
    }
    ++seed;
  }
  for (int64_t mode = 0; mode < 4; ++mode) { // qk_matmul_output's rows are the whole's
    AttnSpec s;
    s.H = 4, s.KVH = 2, s.S = 5, s.L = 6, s.softcap = 1.5f, s.qkMode = mode;
    s.mask = MaskKind::Float, s.maskShape = {1, 4, 5, 6};
    expectForward(s, "chunked, qk mode " + std::to_string(mode));
  }
}

TEST(AttentionGpu, Large) {
  AttnSpec s;
  s.B = 2, s.H = 8, s.KVH = 2, s.S = 1000, s.L = 1000, s.D = 64, s.Dv = 64, s.causal = true;
  for (ComputeMode m : {ComputeMode::FP32, ComputeMode::BF16}) {
    s.mode = m;
    expectForward(s, std::string("1000 keys ") + cuda::computeModeName(m), 5);
    expectGrad(s, std::string("1000 keys ") + cuda::computeModeName(m), 5);
  }
}

TEST(AttentionGpu, UnsupportedTypeIsAnError) {
  OpCase c;
  c.op = "Attention";
  c.inputs = {randomTensor({1, 2, 3, 4}, 1, DType::F64), randomTensor({1, 2, 3, 4}, 2, DType::F64),
              randomTensor({1, 2, 3, 4}, 3, DType::F64)};
  c.outputs = {{DType::F64, {1, 2, 3, 4}}};
  OpResult r = runOnBoth(c, gpu());
  EXPECT_NE(r.error.find("GPU: Attention:"), std::string::npos) << r.error;
}

} // namespace
