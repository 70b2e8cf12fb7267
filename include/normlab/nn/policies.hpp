#pragma once
// Policies of the transformer block, as stateless tag types.
//
// A normalization scheme says where the model normalizes and which learned
// scales exist; a residual rule says how a sub-layer's output f joins the
// residual stream h. A model is Transformer<T, Scheme, Residual>: each ablation
// is one type. Invalid combinations fail to compile with a sentence naming the fix.
#include <concepts>
#include <string_view>
#include <type_traits>

namespace normlab {

template <class>
inline constexpr bool dependent_false = false;

// What happens to weight matrices after every optimizer step (on the master copy).
enum class WeightConstraint {
  none,       // plain GPT
  unit_norm,  // nGPT: every row/column along the embedding dimension set to norm 1
  bounded,    // anGPT: rows/columns with norm > 1 scaled back to 1 (initialised at 1)
};

// What happens to q and k (per head, after RoPE).
enum class QkMode {
  none,         // GPT: used as they are
  rms_gain,     // GPT+QK-norm: RMSNorm over each head with a learned gain (dk) for q and for k
  unit_scaled,  // nGPT/anGPT: q ← s_qk ⊙ N(q), k ← s_qk ⊙ N(k)
  scaled_only,  // ablation: q ← s_qk ⊙ q (the scale kept, the normalization dropped)
};

// ------------------------------------------------------------------ schemes
// Pre-norm GPT: RMSNorm (learned gain) before attention, before the MLP and
// before the LM head; softmax scale 1/√dk.
struct prenorm_rms {
  static constexpr std::string_view name = "prenorm_rms";
  static constexpr bool rmsnorm_inputs = true;    // x = RMSNorm(h) feeds each sub-layer; final RMSNorm
  static constexpr QkMode qk = QkMode::none;
  static constexpr bool sqrt_dk_softmax = false;  // softmax scale √dk (else 1/√dk)
  static constexpr bool scaled_uv = false;        // MLP intermediate ⊙ s_uv·√d
  static constexpr bool scaled_logits = false;    // logits ⊙ s_z
  static constexpr bool scalar_scales = false;    // α, s_qk, s_uv, s_z one learned scalar each
  static constexpr bool approx_factors = false;   // anGPT's constant output factors
  static constexpr WeightConstraint weights = WeightConstraint::none;
  static constexpr bool hidden_on_sphere = false;
};

// Pre-norm GPT plus RMSNorm with learned gain on q and k per head ("GPT+").
struct prenorm_rms_qknorm : prenorm_rms {
  static constexpr std::string_view name = "prenorm_rms_qknorm";
  static constexpr QkMode qk = QkMode::rms_gain;
};

// nGPT: hidden states and weights on the unit hypersphere, no RMSNorm anywhere.
struct sphere {
  static constexpr std::string_view name = "sphere";
  static constexpr bool rmsnorm_inputs = false;
  static constexpr QkMode qk = QkMode::unit_scaled;
  static constexpr bool sqrt_dk_softmax = true;
  static constexpr bool scaled_uv = true;
  static constexpr bool scaled_logits = true;
  static constexpr bool scalar_scales = false;
  static constexpr bool approx_factors = false;
  static constexpr WeightConstraint weights = WeightConstraint::unit_norm;
  static constexpr bool hidden_on_sphere = true;
};

// nGPT without normalizing q and k (s_qk and the √dk softmax scale kept).
struct sphere_noqknorm : sphere {
  static constexpr std::string_view name = "sphere_noqknorm";
  static constexpr QkMode qk = QkMode::scaled_only;
};

// nGPT with α, s_qk, s_uv and s_z each a single learned scalar.
struct sphere_scalar : sphere {
  static constexpr std::string_view name = "sphere_scalar";
  static constexpr bool scalar_scales = true;
};

// anGPT as published: no exact normalization of hidden states; constant factors
// derived from norm concentration (the MLP's c_mlp and the s_uv·√d scale) keep
// each linear map's output near unit norm at initialisation (docs/angpt.md);
// attention mixing is not rescaled (c_att = 1, as the paper); q,k exactly
// normalized as nGPT; weights bounded to norm ≤ 1 instead of fixed to 1.
struct scalar_factors {
  static constexpr std::string_view name = "scalar_factors";
  static constexpr bool rmsnorm_inputs = false;
  static constexpr QkMode qk = QkMode::unit_scaled;
  static constexpr bool sqrt_dk_softmax = true;
  static constexpr bool scaled_uv = true;
  static constexpr bool scaled_logits = true;
  static constexpr bool scalar_scales = false;
  static constexpr bool approx_factors = true;
  static constexpr WeightConstraint weights = WeightConstraint::bounded;
  static constexpr bool hidden_on_sphere = false;
};

// anGPT as normlab first built it, kept as its own variant (angpt_attnfactor):
// the attention output is also multiplied by c_att, a Monte Carlo estimate of
// 1/‖Σ_s p_ts v_s‖ at initialisation (docs/angpt.md). The paper leaves attention
// mixing un-normalized (causal attention makes such a factor inaccurate), so the
// published anGPT is scalar_factors, with c_att = 1.
struct scalar_factors_attnfactor : scalar_factors {
  static constexpr std::string_view name = "scalar_factors_attnfactor";
  static constexpr bool attention_mixing_factor = true;
};

// How a learned scale of nGPT (s_qk, s_uv, s_z) is held: a vector of one value per
// dimension (the paper), one learned scalar, or fixed at its initial effective value
// (not a parameter, no gradient, no optimizer state; its value follows from the
// model config, which checkpoints record).
enum class ScaleKind { vector, scalar, fixed };
enum class ScaleSite { sqk, suv, sz };

// A scheme may set `sqk_scale`, `suv_scale`, `sz_scale` (ScaleKind) one by one;
// absent, every scale is `scalar` when the scheme's scalar_scales is set, else `vector`.
template <class S, ScaleSite W>
consteval ScaleKind scale_kind_of() {
  if constexpr (W == ScaleSite::sqk && requires { S::sqk_scale; }) return S::sqk_scale;
  else if constexpr (W == ScaleSite::suv && requires { S::suv_scale; }) return S::suv_scale;
  else if constexpr (W == ScaleSite::sz && requires { S::sz_scale; }) return S::sz_scale;
  else return S::scalar_scales ? ScaleKind::scalar : ScaleKind::vector;
}

// The nGPT paper's ablation (§3.3 / appendix): s_qk, s_u and s_ν fixed at their
// initial values, one global learnable scalar s_z; α stays per-dimension.
struct sphere_fixedscales : sphere {
  static constexpr std::string_view name = "sphere_fixedscales";
  static constexpr ScaleKind sqk_scale = ScaleKind::fixed;
  static constexpr ScaleKind suv_scale = ScaleKind::fixed;
  static constexpr ScaleKind sz_scale = ScaleKind::scalar;
};

// Whether a scheme scales the attention output by anGPT's c_att. Optional in a
// scheme (absent = false), so schemes written before it need no change.
template <class S>
consteval bool attention_mixing_factor_of() {
  if constexpr (requires { S::attention_mixing_factor; }) return S::attention_mixing_factor;
  else return false;
}

template <class S>
concept NormScheme = requires {
  { S::name } -> std::convertible_to<std::string_view>;
  { S::rmsnorm_inputs } -> std::convertible_to<bool>;
  { S::qk } -> std::convertible_to<QkMode>;
  { S::sqrt_dk_softmax } -> std::convertible_to<bool>;
  { S::scaled_uv } -> std::convertible_to<bool>;
  { S::scaled_logits } -> std::convertible_to<bool>;
  { S::scalar_scales } -> std::convertible_to<bool>;
  { S::approx_factors } -> std::convertible_to<bool>;
  { S::weights } -> std::convertible_to<WeightConstraint>;
  { S::hidden_on_sphere } -> std::convertible_to<bool>;
};

// ------------------------------------------------------------------ residual rules
// Tags only; their math lives in nn/residual.hpp.
struct residual_add {  // h ← h + f
  static constexpr std::string_view name = "add";
  static constexpr bool learned_alpha = false;
  static constexpr bool retracts = false;  // output lies on the unit sphere
  static constexpr bool nu_scaled = false;
};
struct lerp {  // h ← h + |α| ⊙ (f − h)
  static constexpr std::string_view name = "lerp";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = false;
  static constexpr bool nu_scaled = false;
};
struct lerp_nu {  // h ← ν(α) ⊙ (h + |α| ⊙ (f − h)), ν(α) = 1/√((1−α)² + α²)
  static constexpr std::string_view name = "lerp_nu";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = false;
  static constexpr bool nu_scaled = true;
};
struct lerp_retract {  // h ← N(N(h) + |α| ⊙ (N(f) − N(h)))
  static constexpr std::string_view name = "lerp_retract";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = true;
  static constexpr bool nu_scaled = false;
};
struct slerp {  // h ← N(sin((1−α)θ)/sin θ ⊙ N(h) + sin(αθ)/sin θ ⊙ N(f)), θ = ∠(h, f)
  static constexpr std::string_view name = "slerp";
  static constexpr bool learned_alpha = true;
  static constexpr bool retracts = true;
  static constexpr bool nu_scaled = false;
};

template <class R>
concept ResidualRule = requires {
  { R::name } -> std::convertible_to<std::string_view>;
  { R::learned_alpha } -> std::convertible_to<bool>;
  { R::retracts } -> std::convertible_to<bool>;
  { R::nu_scaled } -> std::convertible_to<bool>;
};

// The combinations that make sense; each refusal says why and what to use.
template <NormScheme S, ResidualRule R>
constexpr bool check_block_policies() {
  static_assert(!S::hidden_on_sphere || R::retracts,
                "normlab: this scheme keeps hidden states on the unit sphere, so its residual rule must "
                "retract to the sphere: use lerp_retract or slerp");
  static_assert(S::hidden_on_sphere || !R::retracts,
                "normlab: a retracting residual rule (lerp_retract, slerp) needs a scheme whose hidden states "
                "live on the sphere (sphere, sphere_noqknorm, sphere_scalar); with prenorm_rms use residual_add "
                "or lerp, with scalar_factors use lerp_nu");
  static_assert(!S::approx_factors || (R::learned_alpha && !R::retracts),
                "normlab: scalar_factors (anGPT) keeps hidden norms near 1 only through an interpolating "
                "residual: use lerp_nu (or lerp to ablate the ν(α) factor), not residual_add");
  static_assert(!R::nu_scaled || S::approx_factors,
                "normlab: lerp_nu's ν(α) restores unit norm only for approximately normalized hidden states: "
                "pair it with scalar_factors; with prenorm_rms use lerp");
  return true;
}

}  // namespace normlab
