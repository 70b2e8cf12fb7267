#pragma once
// Tensor elements between host values and their stored bytes: checked value
// conversions (no silent overflow or truncation), checked sizes and the per-DType
// decode and encode loops. Apart from the file format: the arithmetic of elements.
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "normlab/core/error.hpp"
#include "normlab/io/dtype.hpp"

namespace normlab::io {

// Raw tensor bytes are memcpy'd straight into host values, which is only
// correct because the format is little-endian and so is the host.
static_assert(std::endian::native == std::endian::little,
              "normlab safetensors I/O assumes a little-endian host");

namespace detail {

// double -> float with IEEE round-to-nearest-even, spelled out for values
// beyond the float range (a plain cast of those is undefined in C++).
inline float narrow_to_float(double d) {
  // 2^128 - 2^103 is the midpoint between FLT_MAX and 2^128; ties go to the
  // "even" 2^128, i.e. inf.
  constexpr double overflow = 0x1.ffffffp127;
  constexpr float inf = std::numeric_limits<float>::infinity();
  constexpr float flt_max = std::numeric_limits<float>::max();
  if (std::isfinite(d)) {
    if (std::fabs(d) >= overflow) return d > 0 ? inf : -inf;
    if (std::fabs(d) > static_cast<double>(flt_max)) return d > 0 ? flt_max : -flt_max;
  }
  return static_cast<float>(d);
}

// double -> float rounding to odd. Converting double -> float (RNE) -> half
// can round twice and land on the wrong neighbour at ties; rounding the first
// step to odd keeps a sticky bit so the final RNE step is exact.
inline float narrow_to_float_round_to_odd(double d) {
  if (std::isnan(d)) return static_cast<float>(d);
  // Finite values beyond the float range: the truncated value is FLT_MAX,
  // whose lsb is already odd; the later half rounding turns it into inf.
  constexpr float flt_max = std::numeric_limits<float>::max();
  if (std::isfinite(d) && std::fabs(d) > static_cast<double>(flt_max)) return d > 0 ? flt_max : -flt_max;
  const float f = static_cast<float>(d);
  if (static_cast<double>(f) == d) return f;  // exact (also covers +-inf)
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  // Sign-magnitude encoding: decrementing moves one ulp toward zero, giving
  // the truncated value when RNE rounded away from zero.
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) u -= 1;
  return std::bit_cast<float>(u | 1u);
}

// Converts `v` to Dst. Returns false when the value cannot be represented:
// integer overflow, NaN/inf or non-integral values into an integer type.
// Floating targets never fail (IEEE rounding / overflow to inf).
template <class Dst, class Src>
bool convert_value(Src v, Dst& out) {
  if constexpr (std::same_as<Dst, bool>) {
    out = (v != Src(0));
    return true;
  } else if constexpr (std::floating_point<Dst>) {
    if constexpr (std::same_as<Src, bool>) out = v ? Dst(1) : Dst(0);
    else if constexpr (std::same_as<Dst, float> && std::same_as<Src, double>) out = narrow_to_float(v);
    else out = static_cast<Dst>(v);
    return true;
  } else if constexpr (std::same_as<Src, bool>) {
    out = v ? Dst(1) : Dst(0);
    return true;
  } else if constexpr (std::integral<Src>) {
    if (!std::in_range<Dst>(v)) return false;
    out = static_cast<Dst>(v);
    return true;
  } else {
    // Floating -> integer: only exact integral values in range are accepted;
    // silently truncating 2.5 to 2 would hide a mismatched tensor.
    const double d = static_cast<double>(v);  // float -> double is exact
    if (!std::isfinite(d) || std::trunc(d) != d) return false;
    // Both bounds are powers of two (or 0), hence exact in double.
    const double lo = static_cast<double>(std::numeric_limits<Dst>::min());
    const double hi = std::ldexp(1.0, std::numeric_limits<Dst>::digits);  // max + 1
    if (d < lo || d >= hi) return false;
    out = static_cast<Dst>(d);
    return true;
  }
}

// Any element value -> float for storing as F16/BF16, rounding only once
// (exact for integers up to 2^53).
template <class T>
float to_float_for_half(T v) {
  if constexpr (std::same_as<T, bool>) return v ? 1.0f : 0.0f;
  else if constexpr (std::same_as<T, float>) return v;
  else return narrow_to_float_round_to_odd(static_cast<double>(v));
}

template <class T>
std::string value_string(T v) {
  std::ostringstream os;
  os.precision(17);
  if constexpr (std::same_as<T, bool>) os << (v ? "true" : "false");
  else os << +v;  // unary + prints 8-bit integers as numbers
  return os.str();
}

// Product of dims; nullopt for a negative dim or int64 overflow.
inline std::optional<std::int64_t> checked_numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) return std::nullopt;
    n *= d;
  }
  return n;
}

inline std::optional<std::size_t> checked_mul(std::size_t a, std::size_t b) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) return std::nullopt;
  return a * b;
}

inline std::string quoted(const std::string& name) { return "tensor '" + name + "'"; }

// Decodes `out.size()` stored elements starting at `src` into `out`.
// `decode` maps the raw stored value to its natural host value.
template <class Stored, class Dst, class Decode>
void decode_loop(const std::uint8_t* src, std::span<Dst> out, DType stored, const std::string& where,
                 Decode decode) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    Stored s;
    std::memcpy(&s, src + i * sizeof(Stored), sizeof(Stored));
    const auto v = decode(s);
    if (!convert_value(v, out[i]))
      throw Error(where + ": element " + std::to_string(i) + " (" + dtype_name(stored) + " value " +
                  value_string(v) + ") cannot be represented as " + dtype_name(dtype_of<Dst>()));
  }
}

template <class Dst>
void decode_into(DType dt, const std::uint8_t* src, std::span<Dst> out, const std::string& where) {
  auto same = [](auto v) { return v; };
  switch (dt) {
    case DType::F64: return decode_loop<double>(src, out, dt, where, same);
    case DType::F32: return decode_loop<float>(src, out, dt, where, same);
    case DType::F16: return decode_loop<std::uint16_t>(src, out, dt, where, f16_to_float);
    case DType::BF16: return decode_loop<std::uint16_t>(src, out, dt, where, bf16_to_float);
    case DType::I64: return decode_loop<std::int64_t>(src, out, dt, where, same);
    case DType::I32: return decode_loop<std::int32_t>(src, out, dt, where, same);
    case DType::I16: return decode_loop<std::int16_t>(src, out, dt, where, same);
    case DType::I8: return decode_loop<std::int8_t>(src, out, dt, where, same);
    case DType::U64: return decode_loop<std::uint64_t>(src, out, dt, where, same);
    case DType::U32: return decode_loop<std::uint32_t>(src, out, dt, where, same);
    case DType::U16: return decode_loop<std::uint16_t>(src, out, dt, where, same);
    case DType::U8: return decode_loop<std::uint8_t>(src, out, dt, where, same);
    case DType::BOOL: return decode_loop<std::uint8_t>(src, out, dt, where, [](std::uint8_t b) { return b != 0; });
  }
  throw Error(where + ": invalid DType value");
}

// Encodes `in` as `Stored` values appended to `out`. `encode(value, stored&)`
// returns false when the value cannot be represented.
template <class Stored, class T, class Encode>
void encode_loop(std::span<const T> in, std::vector<std::uint8_t>& out, DType dt, const std::string& where,
                 Encode encode) {
  const std::size_t start = out.size();
  out.resize(start + in.size() * sizeof(Stored));
  for (std::size_t i = 0; i < in.size(); ++i) {
    Stored s{};
    if (!encode(in[i], s))
      throw Error(where + ": element " + std::to_string(i) + " (value " + value_string(in[i]) +
                  ") cannot be represented as " + dtype_name(dt));
    std::memcpy(out.data() + start + i * sizeof(Stored), &s, sizeof(Stored));
  }
}

template <class T>
void encode_into(DType dt, std::span<const T> in, std::vector<std::uint8_t>& out, const std::string& where) {
  auto plain = [](T v, auto& s) { return convert_value(v, s); };
  switch (dt) {
    case DType::F64: return encode_loop<double>(in, out, dt, where, plain);
    case DType::F32: return encode_loop<float>(in, out, dt, where, plain);
    case DType::F16:
      return encode_loop<std::uint16_t>(in, out, dt, where, [](T v, std::uint16_t& s) {
        s = float_to_f16(to_float_for_half(v));
        return true;
      });
    case DType::BF16:
      return encode_loop<std::uint16_t>(in, out, dt, where, [](T v, std::uint16_t& s) {
        s = float_to_bf16(to_float_for_half(v));
        return true;
      });
    case DType::I64: return encode_loop<std::int64_t>(in, out, dt, where, plain);
    case DType::I32: return encode_loop<std::int32_t>(in, out, dt, where, plain);
    case DType::I16: return encode_loop<std::int16_t>(in, out, dt, where, plain);
    case DType::I8: return encode_loop<std::int8_t>(in, out, dt, where, plain);
    case DType::U64: return encode_loop<std::uint64_t>(in, out, dt, where, plain);
    case DType::U32: return encode_loop<std::uint32_t>(in, out, dt, where, plain);
    case DType::U16: return encode_loop<std::uint16_t>(in, out, dt, where, plain);
    case DType::U8: return encode_loop<std::uint8_t>(in, out, dt, where, plain);
    case DType::BOOL:
      return encode_loop<std::uint8_t>(in, out, dt, where, [](T v, std::uint8_t& s) {
        bool b = false;
        convert_value(v, b);
        s = b ? 1 : 0;
        return true;
      });
  }
  throw Error(where + ": invalid DType value");
}

}  // namespace detail

}  // namespace normlab::io
