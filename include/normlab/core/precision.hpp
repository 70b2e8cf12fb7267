#pragma once
// The arithmetic a float32 model's products run in: every GEMM in float32
// (fp32), or with its operands rounded to bf16 and products accumulated in
// float32 (bf16). Master weights, optimizer state, norms, softmax, residual
// updates, losses and reductions stay float32 in both (docs/design.md); a
// float64 model ignores it (the oracle is always exact float64).
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

}  // namespace normlab
