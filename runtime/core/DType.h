#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace megac {

// Element types. The numbering is ONNX's TensorProto.DataType, so conversion is a cast.
enum class DType : int32_t {
  Undefined = 0,
  F32 = 1,
  U8 = 2,
  I8 = 3,
  U16 = 4,
  I16 = 5,
  I32 = 6,
  I64 = 7,
  String = 8,
  Bool = 9,
  F16 = 10,
  F64 = 11,
  U32 = 12,
  U64 = 13,
  BF16 = 16,
};

size_t dtypeSize(DType t);
// Short textual name used by the IR ("f32", "i64", "bool", ...).
const char *dtypeName(DType t);
std::optional<DType> parseDType(std::string_view name);
bool isFloatType(DType t);
bool isIntegerType(DType t);
bool isSignedType(DType t);

// bf16 / f16 <-> f32 conversions (round to nearest even).
uint16_t floatToBf16(float f);
float bf16ToFloat(uint16_t b);
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);

} // namespace megac
