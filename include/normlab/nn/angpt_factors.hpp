#pragma once
// anGPT's constant output factors (derivations in docs/angpt.md).
//
// Norm concentration: for a unit x in d dimensions and a matrix with r
// unit-norm rows in random directions, E‖Wx‖² = r/d; with unit-norm columns
// (normalized along the output dimension d), E‖Wy‖² = ‖y‖². The two factors
// that do not follow from that identity alone are estimated by Monte Carlo,
// deterministically (fixed seed), when a model is constructed.
#include <cmath>
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "normlab/nn/config.hpp"

namespace normlab {

namespace detail {
// Standard normal pairs from a fixed generator: the same factors on every platform.
class NormalStream {
 public:
  explicit NormalStream(std::uint64_t seed) : rng_(seed) {}
  double next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (double(rng_() >> 11) + 0.5) * 0x1.0p-53, u2 = (double(rng_() >> 11) + 0.5) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)), t = 6.283185307179586476925286766559 * u2;
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  std::mt19937_64 rng_;
  double spare_ = 0;
  bool has_spare_ = false;
};
}  // namespace detail

// κ = E[(u·silu(g))²] for u, g ~ N(0,1) independent: the gated activation's
// second moment when the MLP intermediate is scaled to unit variance (s_uv·√d).
inline double gated_activation_second_moment(std::int64_t samples = 1 << 20) {
  detail::NormalStream n(0x5eed5eedULL);
  double acc = 0;
  for (std::int64_t i = 0; i < samples; ++i) {
    const double u = n.next(), g = n.next();
    const double a = u * g / (1.0 + std::exp(-g));
    acc += a * a;
  }
  return acc / double(samples);
}

// MLP output m = W_proj (u ⊙ silu(g)), W_proj with 4d unit columns:
// E‖m‖² = 4d·κ, so the factor is 1/√(4dκ).
inline double angpt_mlp_factor(std::int64_t d) {
  return 1.0 / std::sqrt(4.0 * double(d) * gated_activation_second_moment());
}

// Attention output y_t = Σ_s p_ts v_s with E‖v‖² = d/d = 1 (W_v has d unit
// rows) and independent values: E‖y_t‖² = E[Σ_s p_ts²], which depends on how
// spread the causal softmax is. With unit q, k per head and scores
// √dk·s_qk²·(q̂·k̂), estimate the mean over positions t < T by Monte Carlo; W_o
// (unit columns) preserves the norm, so the factor is 1/√(mean E‖y_t‖²).
inline double angpt_attention_factor(std::int64_t dk, std::int64_t T, double sqk) {
  detail::NormalStream n(0xa77e7710ULL);
  // About 2^23 multiply-adds whatever the size; at least one full draw.
  const std::int64_t reps = std::max<std::int64_t>(1, (std::int64_t(1) << 23) / std::max<std::int64_t>(1, T * T * dk));
  std::vector<double> q(T * dk), k(T * dk), row(T);
  auto unit_rows = [&](std::vector<double>& m) {
    for (std::int64_t t = 0; t < T; ++t) {
      double ss = 0;
      for (std::int64_t i = 0; i < dk; ++i) ss += (m[t * dk + i] = n.next()) * m[t * dk + i];
      for (std::int64_t i = 0; i < dk; ++i) m[t * dk + i] /= std::sqrt(ss);
    }
  };
  const double scale = std::sqrt(double(dk)) * sqk * sqk;
  double total = 0;
  for (std::int64_t r = 0; r < reps; ++r) {
    unit_rows(q);
    unit_rows(k);
    for (std::int64_t t = 0; t < T; ++t) {
      double mx = -1e300;
      for (std::int64_t s = 0; s <= t; ++s) {
        double dot = 0;
        for (std::int64_t i = 0; i < dk; ++i) dot += q[t * dk + i] * k[s * dk + i];
        row[s] = scale * dot;
        mx = std::max(mx, row[s]);
      }
      double z = 0, z2 = 0;
      for (std::int64_t s = 0; s <= t; ++s) z += (row[s] = std::exp(row[s] - mx));
      for (std::int64_t s = 0; s <= t; ++s) z2 += (row[s] / z) * (row[s] / z);
      total += z2;
    }
  }
  return 1.0 / std::sqrt(total / double(reps * T));
}

// ------------------------------------------------------------------ output-factor policies
// The constants that multiply each sub-layer's output (the GEMM's alpha):
// attn(cfg, max_seq) for the attention output, mlp(cfg) for the MLP's.
// `approximate` says the scheme keeps hidden norms near 1 through them (anGPT),
// which the block's policy check pairs with an interpolating residual.
struct unit_output_factors {
  static constexpr std::string_view name = "none";
  static constexpr bool approximate = false;
  static double attn(const ModelConfig&, std::int64_t /*max_seq*/) { return 1.0; }
  static double mlp(const ModelConfig&) { return 1.0; }
};

// anGPT: c_mlp from norm concentration; c_att only with WithAttentionFactor
// (normlab's angpt_attnfactor; the paper leaves attention mixing unscaled).
template <bool WithAttentionFactor>
struct angpt_output_factors {
  static constexpr std::string_view name = WithAttentionFactor ? "angpt_attnfactor" : "angpt";
  static constexpr bool approximate = true;
  static double attn(const ModelConfig& cfg, std::int64_t max_seq) {
    // The multiplier (the 0.5x/2x ablation) scales the factor there is: 1 where
    // the paper leaves attention mixing unscaled.
    if constexpr (WithAttentionFactor)
      return cfg.angpt_attn_factor_mult * angpt_attention_factor(cfg.head_dim(), max_seq, cfg.sqk_init);
    else
      return cfg.angpt_attn_factor_mult;
  }
  // For the SwiGLU MLP (κ above) of width F = d_ff (4d by default: angpt_mlp_factor).
  static double mlp(const ModelConfig& cfg) {
    const double f = cfg.ff_dim() == 4 * cfg.n_embd ? angpt_mlp_factor(cfg.n_embd)
                                                    : 1.0 / std::sqrt(double(cfg.ff_dim()) * gated_activation_second_moment());
    return cfg.angpt_mlp_factor_mult * f;
  }
};

}  // namespace normlab
