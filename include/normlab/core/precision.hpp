#pragma once
// The arithmetic a float32 model's products run in: every GEMM in float32
// (fp32), or with its operands rounded to bf16 and products accumulated in
// float32 (bf16). Master weights, optimizer state, norms, softmax, residual
// updates, losses and reductions stay float32 in both (docs/design.md). A
// float64 model under bf16 rounds its products' operands to bf16 and multiplies
// in float64: the oracle of the bf16 method; under fp32 it is the exact oracle.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace normlab {

enum class Precision { fp32, bf16 };

inline constexpr std::string_view precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }

// "fp32" or "bf16"; nothing for anything else.
inline std::optional<Precision> parse_precision(std::string_view s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  return std::nullopt;
}

// bf16 is the top half of an IEEE float: rounding to it keeps 8 significant bits.
// Round to nearest, ties to even (the BF16 instructions' rule for normal values).
inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    // NaN: plain truncation could drop every payload bit and yield inf, so
    // keep sign + top payload bits and force the quiet bit.
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  }
  // Add just under half an ulp, plus one more when the kept lsb is odd. A carry
  // into the exponent is exactly right (including rounding the largest floats up to inf).
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
inline float bf16_to_float(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

// x rounded to bf16 as the bf16 method's products read it: via float (as a
// float32 model holds it), to nearest even, a float32 subnormal read as +0 (as
// the BF16 instructions read one). The float64 oracle's rounding of every
// operand and kept activation; the bits are what the AVX-512 rounding stores.
inline std::uint16_t bf16_method_bits(double x) {
  const float f = float(x);
  return std::abs(f) < std::numeric_limits<float>::min() ? std::uint16_t(0) : float_to_bf16(f);
}
inline double bf16_method_round(double x) { return double(bf16_to_float(bf16_method_bits(x))); }

// A value stored in bf16 (an activation kept for the backward at half the
// bytes): its own type, so a bf16 buffer never passes for a float one.
// OpenBLAS's cblas.h declares a global `bfloat16` too: code that says `using
// namespace normlab` beside it writes normlab::bfloat16.
enum class bfloat16 : std::uint16_t {};
inline bfloat16 to_bfloat16(float f) { return bfloat16{float_to_bf16(f)}; }
inline float to_float(bfloat16 b) { return bf16_to_float(static_cast<std::uint16_t>(b)); }

}  // namespace normlab
