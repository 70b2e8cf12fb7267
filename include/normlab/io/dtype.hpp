#pragma once
// The safetensors element types (DType, its names and sizes, the host types that
// map to each) and the bit-exact float16/bfloat16 conversions. Apart: the type
// vocabulary the codec, the reader and the writer share.
#include <bit>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "normlab/core/error.hpp"
#include "normlab/core/precision.hpp"

namespace normlab::io {

// ---------------------------------------------------------------------------
// Data types
// ---------------------------------------------------------------------------

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL };

inline constexpr DType kAllDTypes[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64,
                                       DType::I32, DType::I16, DType::I8,  DType::U64,  DType::U32,
                                       DType::U16, DType::U8,  DType::BOOL};

inline std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::F64: case DType::I64: case DType::U64: return 8;
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
    case DType::I8: case DType::U8: case DType::BOOL: return 1;
  }
  // Only reachable with a value cast from an out-of-range integer.
  throw Error("dtype_size: invalid DType value " + std::to_string(static_cast<int>(d)));
}

// Names exactly as they appear in the safetensors "dtype" field.
inline const char* dtype_name(DType d) {
  switch (d) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U64: return "U64";
    case DType::U32: return "U32";
    case DType::U16: return "U16";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
  }
  throw Error("dtype_name: invalid DType value " + std::to_string(static_cast<int>(d)));
}

inline std::optional<DType> parse_dtype(std::string_view s) {
  for (DType d : kAllDTypes)
    if (s == dtype_name(d)) return d;
  return std::nullopt;
}

// Host types that can be read from / written to a tensor. Character types are
// excluded on purpose: `char` has implementation-defined signedness and is
// almost always a mistake when used as a number.
template <class T>
concept Element =
    std::same_as<T, bool> || std::same_as<T, float> || std::same_as<T, double> ||
    (std::integral<T> && sizeof(T) <= 8 && !std::same_as<T, char> && !std::same_as<T, wchar_t> &&
     !std::same_as<T, char8_t> && !std::same_as<T, char16_t> && !std::same_as<T, char32_t>);

// Maps by size and signedness rather than by exact type so that e.g. both
// `long` and `long long` map to I64.
template <class T>
constexpr DType dtype_of() {
  static_assert(Element<T>, "dtype_of<T>: T must be bool, float, double or a 1/2/4/8-byte integer");
  if constexpr (std::same_as<T, bool>) return DType::BOOL;
  else if constexpr (std::same_as<T, double>) return DType::F64;
  else if constexpr (std::same_as<T, float>) return DType::F32;
  else if constexpr (std::is_signed_v<T>) {
    if constexpr (sizeof(T) == 8) return DType::I64;
    else if constexpr (sizeof(T) == 4) return DType::I32;
    else if constexpr (sizeof(T) == 2) return DType::I16;
    else return DType::I8;
  } else {
    if constexpr (sizeof(T) == 8) return DType::U64;
    else if constexpr (sizeof(T) == 4) return DType::U32;
    else if constexpr (sizeof(T) == 2) return DType::U16;
    else return DType::U8;
  }
}

// ---------------------------------------------------------------------------
// Half-precision conversions (bit-exact, no hardware support needed)
// ---------------------------------------------------------------------------

// bf16 conversions: the one definition is core/precision.hpp's.
using normlab::bf16_to_float;
using normlab::float_to_bf16;

inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f)  // inf / NaN (payload kept in the top mantissa bits)
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {  // zero / subnormal: value = mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t fexp = (u >> 23) & 0xffu;
  const std::uint32_t mant = u & 0x7fffffu;

  if (fexp == 0xff) {
    if (mant == 0) return sign | 0x7c00u;  // inf
    // NaN: keep the top payload bits, force quiet so it can't become inf.
    return static_cast<std::uint16_t>(sign | 0x7e00u | (mant >> 13));
  }

  const int e = static_cast<int>(fexp) - 127 + 15;  // exponent in f16 bias
  if (e >= 31) return sign | 0x7c00u;              // too large even before rounding
  if (e <= 0) {
    // Result is subnormal (or zero). Values below 2^-25 (half the smallest
    // subnormal) round to zero; 2^-25 itself is a tie that rounds to even 0.
    if (e < -10) return sign;
    const std::uint32_t m = mant | 0x800000u;  // restore the implicit 1
    const int shift = 14 - e;                 // 14..24
    std::uint32_t half = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;  // may become 0x400 = min normal: correct
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t h = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry into exponent / to inf is correct
  return static_cast<std::uint16_t>(sign | h);
}

}  // namespace normlab::io
