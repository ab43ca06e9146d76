#include "runtime/core/DType.h"

#include <cmath>
#include <cstring>

namespace megac {

size_t dtypeSize(DType t) {
  switch (t) {
  case DType::F32: case DType::I32: case DType::U32: return 4;
  case DType::F64: case DType::I64: case DType::U64: return 8;
  case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
  case DType::I8: case DType::U8: case DType::Bool: return 1;
  default: return 0;
  }
}

const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32: return "f32";
  case DType::F64: return "f64";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::I8: return "i8";
  case DType::I16: return "i16";
  case DType::I32: return "i32";
  case DType::I64: return "i64";
  case DType::U8: return "u8";
  case DType::U16: return "u16";
  case DType::U32: return "u32";
  case DType::U64: return "u64";
  case DType::Bool: return "bool";
  case DType::String: return "string";
  default: return "undef";
  }
}

std::optional<DType> parseDType(std::string_view n) {
  static const DType all[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8,
                              DType::I16, DType::I32, DType::I64, DType::U8,  DType::U16,
                              DType::U32, DType::U64, DType::Bool, DType::String};
  for (DType t : all)
    if (n == dtypeName(t)) return t;
  return std::nullopt;
}

bool isFloatType(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}
bool isIntegerType(DType t) {
  switch (t) {
  case DType::I8: case DType::I16: case DType::I32: case DType::I64:
  case DType::U8: case DType::U16: case DType::U32: case DType::U64: return true;
  default: return false;
  }
}
bool isSignedType(DType t) {
  return t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64 || isFloatType(t);
}

uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
float bf16ToFloat(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t mant = x & 0x007fffff;
  int exp = int((x >> 23) & 0xff);
  if (exp == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  int e = exp - 127 + 15;
  if (e >= 31) return uint16_t(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return uint16_t(sign);
    mant |= 0x00800000;
    int shift = 14 - e;
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = sign | (uint32_t(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return uint16_t(h);
}
float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  int exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff, u;
  if (exp == 0) {
    if (mant == 0) u = sign;
    else {
      exp = 1;
      while (!(mant & 0x400)) { mant <<= 1; --exp; }
      mant &= 0x3ff;
      u = sign | (uint32_t(exp + 127 - 15) << 23) | (mant << 13);
    }
  } else if (exp == 31) u = sign | 0x7f800000 | (mant << 13);
  else u = sign | (uint32_t(exp + 127 - 15) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

} // namespace megac
