#pragma once
// Normalization schemes: compositions of behaviour policies.
//
// A scheme names, for each place the block normalizes or scales, the policy
// type that does it; each policy declares its own parameters (with their
// init), what it saves for backward, and its forward and backward
// (nn/norms.hpp, nn/qk.hpp, nn/mlp.hpp, nn/logits.hpp, nn/angpt_factors.hpp,
// nn/constraint.hpp). A residual rule (nn/residual.hpp) owns its α. A model is
// Transformer<T, Scheme, Residual, Backend>: each ablation is one type, and a
// user's scheme is a struct in the user's own file, usually derived from one
// of these with one member replaced:
//
//   struct my_scheme : normlab::prenorm_rms {
//     static constexpr std::string_view name = "my_scheme";
//     using input_norm = my_norm;
//   };
//
// The members (all required; derive to inherit them):
//   name            what checkpoints record ("<scheme>+<residual>")
//   input_norm      before each sub-layer            (no_norm | rms_norm | yours)
//   output_norm     on each sub-layer's output       (no_norm | rms_norm (Peri-LN) | yours)
//   final_norm      before the LM head               (no_norm | rms_norm | yours)
//   qk              q, k after their projections     (qk_rope | qk_rms_gain | qk_unit_scaled<K> | qk_scaled_only<K>)
//   mlp_activation  the MLP's gate                   (swiglu | scaled_swiglu<K>)
//   logit_scale     on the LM head's output          (no_logit_scale | scaled_logits<K>)
//   output_factors  constants on sub-layer outputs   (unit_output_factors | angpt_output_factors<c_att?>)
//   constraint      on the weights after each step   (no_constraint | unit_norm_constraint | bounded_constraint)
//   alpha_kind      how a residual rule's α is held  (ScaleKind::vector | ScaleKind::scalar)
//   softmax         attention's softmax scale        (SoftmaxScale::inv_sqrt_dk | SoftmaxScale::sqrt_dk)
//   hidden_on_sphere  whether the residual stream lives on the unit sphere
//                     (then the residual rule must retract, and the weights'
//                     default init std is 1/√d instead of 0.02)
// and one optional member (absent: no_norm):
//   embedding_norm  on the embedding, before layer 0 (no_norm | layer_norm | rms_norm | yours)
// The block's layout (pre-norm, post-norm, sandwich) is a choice of these and
// of the residual rule: nn/layout.hpp. Attention's and the MLP's shapes,
// positions (RoPE, none, learned) and biases are the config's (nn/config.hpp).
// Invalid combinations fail to compile with a sentence naming the fix.
#include <cmath>
#include <concepts>
#include <string_view>
#include <type_traits>

#include "normlab/nn/angpt_factors.hpp"
#include "normlab/nn/constraint.hpp"
#include "normlab/nn/layout.hpp"
#include "normlab/nn/logits.hpp"
#include "normlab/nn/mlp.hpp"
#include "normlab/nn/norms.hpp"
#include "normlab/nn/qk.hpp"
#include "normlab/nn/residual.hpp"
#include "normlab/nn/scale.hpp"

namespace normlab {

enum class SoftmaxScale { inv_sqrt_dk, sqrt_dk };

namespace detail {
template <class S>
struct embedding_norm_member {
  using type = no_norm;
};
template <class S>
  requires requires { typename S::embedding_norm; }
struct embedding_norm_member<S> {
  using type = typename S::embedding_norm;
};
}  // namespace detail
// A scheme's embedding_norm, or no_norm where it has none.
template <class S>
using embedding_norm_of = typename detail::embedding_norm_member<S>::type;

// ------------------------------------------------------------------ schemes
// Pre-norm GPT: RMSNorm (learned gain) before attention, before the MLP and
// before the LM head; softmax scale 1/√dk.
struct prenorm_rms {
  static constexpr std::string_view name = "prenorm_rms";
  using input_norm = rms_norm;
  using output_norm = no_norm;
  using final_norm = rms_norm;
  using qk = qk_rope;
  using mlp_activation = swiglu;
  using logit_scale = no_logit_scale;
  using output_factors = unit_output_factors;
  using constraint = no_constraint;
  static constexpr ScaleKind alpha_kind = ScaleKind::vector;
  static constexpr SoftmaxScale softmax = SoftmaxScale::inv_sqrt_dk;
  static constexpr bool hidden_on_sphere = false;
};

// Pre-norm GPT plus RMSNorm with learned gain on q and k per head ("GPT+").
struct prenorm_rms_qknorm : prenorm_rms {
  static constexpr std::string_view name = "prenorm_rms_qknorm";
  using qk = qk_rms_gain;
};

// nGPT: hidden states and weights on the unit hypersphere, no RMSNorm anywhere;
// s_qk on unit q/k, s_uv on the MLP intermediate, s_z on the logits; √dk softmax.
struct sphere {
  static constexpr std::string_view name = "sphere";
  using input_norm = no_norm;
  using output_norm = no_norm;
  using final_norm = no_norm;
  using qk = qk_unit_scaled<ScaleKind::vector>;
  using mlp_activation = scaled_swiglu<ScaleKind::vector>;
  using logit_scale = scaled_logits<ScaleKind::vector>;
  using output_factors = unit_output_factors;
  using constraint = unit_norm_constraint;
  static constexpr ScaleKind alpha_kind = ScaleKind::vector;
  static constexpr SoftmaxScale softmax = SoftmaxScale::sqrt_dk;
  static constexpr bool hidden_on_sphere = true;
};

// nGPT without normalizing q and k (s_qk and the √dk softmax scale kept).
struct sphere_noqknorm : sphere {
  static constexpr std::string_view name = "sphere_noqknorm";
  using qk = qk_scaled_only<ScaleKind::vector>;
};

// nGPT with α, s_qk, s_uv and s_z each a single learned scalar.
struct sphere_scalar : sphere {
  static constexpr std::string_view name = "sphere_scalar";
  using qk = qk_unit_scaled<ScaleKind::scalar>;
  using mlp_activation = scaled_swiglu<ScaleKind::scalar>;
  using logit_scale = scaled_logits<ScaleKind::scalar>;
  static constexpr ScaleKind alpha_kind = ScaleKind::scalar;
};

// The nGPT paper's ablation (§3.3 / appendix): s_qk, s_u and s_ν fixed at their
// initial values, one global learnable scalar s_z; α stays per-dimension.
struct sphere_fixedscales : sphere {
  static constexpr std::string_view name = "sphere_fixedscales";
  using qk = qk_unit_scaled<ScaleKind::fixed>;
  using mlp_activation = scaled_swiglu<ScaleKind::fixed>;
  using logit_scale = scaled_logits<ScaleKind::scalar>;
};

// anGPT as published: no exact normalization of hidden states; constant factors
// derived from norm concentration (the MLP's c_mlp and the s_uv·√d scale) keep
// each linear map's output near unit norm at initialisation (docs/angpt.md);
// attention mixing is not rescaled (c_att = 1, as the paper); q,k exactly
// normalized as nGPT; weights bounded to norm ≤ 1 instead of fixed to 1.
struct approx_sphere : sphere {
  static constexpr std::string_view name = "approx_sphere";
  using output_factors = angpt_output_factors<false>;
  using constraint = bounded_constraint;
  static constexpr bool hidden_on_sphere = false;
};

// anGPT as normlab first built it, kept as its own variant (angpt_attnfactor):
// the attention output is also multiplied by c_att, a Monte Carlo estimate of
// 1/‖Σ_s p_ts v_s‖ at initialisation (docs/angpt.md). The paper leaves attention
// mixing un-normalized (causal attention makes such a factor inaccurate), so the
// published anGPT is approx_sphere, with c_att = 1.
struct approx_sphere_attnfactor : approx_sphere {
  static constexpr std::string_view name = "approx_sphere_attnfactor";
  using output_factors = angpt_output_factors<true>;
};

template <class S>
concept NormScheme = requires {
  { S::name } -> std::convertible_to<std::string_view>;
  typename S::input_norm;
  typename S::output_norm;
  typename S::final_norm;
  typename S::qk;
  typename S::mlp_activation;
  typename S::logit_scale;
  typename S::output_factors;
  typename S::constraint;
  { S::alpha_kind } -> std::convertible_to<ScaleKind>;
  { S::softmax } -> std::convertible_to<SoftmaxScale>;
  { S::hidden_on_sphere } -> std::convertible_to<bool>;
};

// Hidden norms held near 1, exactly (the sphere) or approximately (anGPT's
// factors): such schemes train without warmup or weight decay (driver defaults).
template <NormScheme S>
inline constexpr bool keeps_unit_hidden = S::hidden_on_sphere || S::output_factors::approximate;

template <NormScheme S>
double softmax_scale_of(std::int64_t head_dim) {
  const double D = double(head_dim);
  return S::softmax == SoftmaxScale::sqrt_dk ? std::sqrt(D) : 1.0 / std::sqrt(D);
}

// The combinations that make sense; each refusal says why and what to use.
template <NormScheme S, ResidualRule R>
constexpr bool check_block_policies() {
  constexpr bool approx = S::output_factors::approximate;
  static_assert(!S::hidden_on_sphere || rule_retracts<R>(),
                "normlab: this scheme keeps hidden states on the unit sphere, so its residual rule must "
                "retract to the sphere: use lerp_retract or slerp");
  static_assert(S::hidden_on_sphere || !rule_retracts<R>(),
                "normlab: a retracting residual rule (lerp_retract, slerp) needs a scheme whose hidden states "
                "live on the sphere (sphere, sphere_noqknorm, sphere_scalar); with prenorm_rms use residual_add "
                "or lerp, with approx_sphere use lerp_nu");
  static_assert(!approx || (rule_learns_alpha<R>() && !rule_retracts<R>()),
                "normlab: approx_sphere (anGPT) keeps hidden norms near 1 only through an interpolating "
                "residual: use lerp_nu (or lerp to ablate the ν(α) factor), not residual_add");
  static_assert(!rule_nu_scaled<R>() || approx,
                "normlab: lerp_nu's ν(α) restores unit norm only for approximately normalized hidden states: "
                "pair it with approx_sphere; with prenorm_rms use lerp");
  static_assert(S::alpha_kind != ScaleKind::fixed,
                "normlab: a scheme's alpha_kind is vector or scalar (a residual step α is learned)");
  return true;
}

}  // namespace normlab
