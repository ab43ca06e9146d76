#pragma once
// Shape rules of LayerNormalization, RMSNormalization, Attention and
// RotaryEmbedding, shared by IR type inference and the CPU kernels so that
// both accept exactly the same inputs. Errors are plain messages; callers
// wrap them with the op's name.
#include "runtime/core/Attrs.h"
#include "runtime/core/Tensor.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace megac::cpu {

// --- LayerNormalization / RMSNormalization ---
struct NormDims {
  int64_t axis = 0; // in [0, rank)
  int64_t rows = 1; // product of the dims before axis
  int64_t cols = 1; // product of the dims from axis on (the normalized size)
  Shape statShape;  // X's shape with the normalized dims set to 1 (Mean, InvStdDev)
};
llvm::Expected<NormDims> normDims(const Shape &x, int64_t axis);
// Scale and B must broadcast unidirectionally to X.
llvm::Error checkNormParam(const Shape &param, const Shape &x, llvm::StringRef what);
// ONNX stash_type (a TensorProto dtype number) as a float DType.
llvm::Expected<DType> stashDType(int64_t stashType);

// --- Attention (the newest form: opset 24 inputs, opset 25 window attributes) ---
struct AttentionInputShapes {
  const Shape *q = nullptr, *k = nullptr, *v = nullptr;
  const Shape *mask = nullptr, *pastKey = nullptr, *pastValue = nullptr, *nonpadKvSeqlen = nullptr;
};

struct AttentionDims {
  bool is3D = false;
  int64_t batch = 0, qHeads = 0, kvHeads = 0;
  int64_t qSeq = 0, kvSeq = 0, pastSeq = 0, totalSeq = 0;
  int64_t headSize = 0, vHeadSize = 0;
  double scale = 1;   // applied to Q*K^T (as sqrt(scale) on each side)
  float softcap = 0;  // 0: none
  int64_t qkMode = 0; // qk_matmul_output_mode
  bool causal = false;
  int64_t leftWindow = -1, rightWindow = -1;
  Shape mask4; // the mask's shape right-aligned to rank 4; empty without a mask
  Shape yShape, presentKeyShape, presentValueShape, qkShape;
};
llvm::Expected<AttentionDims> attentionDims(const Attrs &attrs, const AttentionInputShapes &in);

// --- RotaryEmbedding ---
struct RotaryDims {
  bool is3D = false;
  int64_t batch = 0, heads = 0, seq = 0, headSize = 0, rotaryDim = 0;
  bool interleaved = false;
  bool hasPositionIds = false;
  int64_t maxPositions = 0; // rows of the caches, with position_ids
  // Dims of the per-token caches (without position_ids) or of position_ids
  // (with them): each equals batch/seq or is 1 (broadcast).
  int64_t tableBatch = 0, tableSeq = 0;
};
llvm::Expected<RotaryDims> rotaryDims(const Attrs &attrs, const Shape &x, const Shape &cos, const Shape &sin,
                                      const Shape *positionIds);

// Offsets of every index of dims [begin, end) of x into a tensor with the
// given broadcast strides (0 along broadcast dims), in row-major order.
std::vector<int64_t> offsetsOver(const Shape &x, const std::vector<int64_t> &strides, size_t begin, size_t end);

} // namespace megac::cpu
